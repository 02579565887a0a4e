package bench

import "github.com/zeromicro/go-zero/core/logx"

// go-zero logs CPU and shedding statistics to stdout every minute, which
// would land in the middle of benchmark lines and break benchstat.
func init() {
	logx.DisableStat()
	logx.Disable()
}
