package redislimit_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/internal/redistest"
)

// redisAddr is the address of the redis-server the examples share.
var redisAddr string

func TestMain(m *testing.M) {
	if !redistest.Installed() {
		if redistest.Required() {
			fmt.Fprintln(os.Stderr, "redis-server not found in PATH: install it or run `make test`, which does")
			os.Exit(1)
		}
		fmt.Println("redis-server not installed: skipping the package")
		os.Exit(0)
	}
	s, err := redistest.StartProcess()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr = s.Addr
	code := m.Run()
	s.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}
