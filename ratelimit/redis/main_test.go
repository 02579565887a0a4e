package redislimit_test

import (
	"fmt"
	"os"
	"strings"
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
	if code == 0 {
		if err := keysWithoutTTL(s); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	s.Stop()
	if code == 0 {
		// A deadline epoch's timer (time.AfterFunc) closes its channel a
		// call timeout after the epoch began, on a goroutine of its own that
		// lives for that instant: the last calls' timers may fire while
		// the check runs.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/sluice-go/sluice/ratelimit/redis.(*epochs).get.func1")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// keysWithoutTTL reports a key of the examples' server that has no TTL.
func keysWithoutTTL(s *redistest.Server) error {
	cursor := "0"
	for {
		reply, err := s.Do("SCAN", cursor, "COUNT", "1000")
		if err != nil {
			return err
		}
		lines := strings.Split(reply, "\n")
		cursor = lines[0]
		for _, k := range lines[1:] {
			if k == "" {
				continue
			}
			if pttl, err := s.Do("PTTL", k); err != nil || pttl == "-1" {
				return fmt.Errorf("key %q has no TTL (PTTL %s, %v)", k, pttl, err)
			}
		}
		if cursor == "0" {
			return nil
		}
	}
}
