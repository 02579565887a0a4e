package sluice_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/observe/statelog"
	"github.com/sluice-go/sluice/ratelimit"
	redislimit "github.com/sluice-go/sluice/ratelimit/redis"
	"github.com/sluice-go/sluice/rules"
)

// A clock option given a typed nil (a nil *ManualClock) is refused at
// construction, in every package, rather than failing at first use; so are
// degrade's constructors given a Switch or a source that holds nothing.
func TestTypedNilsAreRefusedAtConstruction(t *testing.T) {
	var clk *sluice.ManualClock
	var shed *degrade.Shed
	var client *redis.Client
	for name, build := range map[string]func() error{
		"sluice.WithClock": func() error { _, err := sluice.New(sluice.WithClock(clk)); return err },
		"ratelimit.WithClock": func() error {
			_, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1, ratelimit.WithClock(clk))
			return err
		},
		"breaker.WithClock": func() error { _, err := breaker.New("b", breaker.WithClock(clk)); return err },
		"statelog.WithClock": func() error {
			_, err := statelog.New(slog.Default(), statelog.WithClock(clk))
			return err
		},
		"degrade.WithClock (switch)": func() error { _, err := degrade.NewSwitch("s", degrade.WithClock(clk)); return err },
		"degrade.WithClock (stale)": func() error {
			_, err := degrade.NewStale[string](time.Minute, 1, degrade.WithClock(clk))
			return err
		},
		"degrade.NewAuto (zero Switch)": func() error {
			_, err := degrade.NewAuto(&degrade.Switch{}, func() float64 { return 1 }, degrade.Hysteresis{})
			return err
		},
		"degrade.NewShed (zero Switch)":   func() error { _, err := degrade.NewShed(&degrade.Switch{}, time.Second); return err },
		"degrade.StateSignal (nil *Shed)": func() error { _, _, err := degrade.StateSignal(shed, "on"); return err },
		"redislimit (nil *redis.Client)": func() error {
			_, err := redislimit.NewGCRA(client, ratelimit.PerSecond(1), 1)
			return err
		},
		"rules.WithRedis (nil *redis.Client)": func() error {
			path := filepath.Join(t.TempDir(), "rules.yaml")
			rule := "guards:\n  a:\n    policies:\n      - {name: a, kind: token-bucket, rate: 1/s, burst: 1}\ndefault: a\n"
			if err := os.WriteFile(path, []byte(rule), 0o644); err != nil {
				t.Fatal(err)
			}
			if l, err := rules.New(path); err != nil {
				t.Fatalf("the file itself must load: %v", err)
			} else {
				_ = l.Close()
			}
			_, err := rules.New(path, rules.WithRedis(client))
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panicked: %v", p)
					}
				}()
				err = build()
			}()
			if err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
