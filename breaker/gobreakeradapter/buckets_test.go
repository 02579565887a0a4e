package gobreakeradapter_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sluice-go/sluice/breaker/gobreakeradapter"
)

// gobreaker makes Interval/BucketPeriod buckets up front: a BucketPeriod
// given without its unit (BucketPeriod: 10, 10 ns) under an Interval of a
// minute asks for 6e9 buckets, and at the extreme make panics. New refuses
// it, as it refuses the other settings it cannot honour.
func TestNewRefusesABucketCountItCannotMake(t *testing.T) {
	st := gobreaker.Settings{Interval: time.Duration(1 << 62), BucketPeriod: 1}
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panicked: %v", r)
			}
		}()
		_, err = gobreakeradapter.New(st)
		if err == nil {
			return nil
		}
		return fmt.Errorf("refused: %w", err)
	}()
	if err == nil || !strings.HasPrefix(err.Error(), "refused") {
		t.Errorf("New(Interval %v, BucketPeriod %v): %v; want an error", st.Interval, st.BucketPeriod, err)
	}
}
