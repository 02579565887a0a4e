package sluice_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/middleware"
	sluicegrpc "github.com/sluice-go/sluice/middleware/grpc"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
	"github.com/sluice-go/sluice/ratelimit"
	"github.com/sluice-go/sluice/rules"
)

// A nil option is refused with an error that says which one, by every
// constructor that takes options, as any other bad input is.
func TestANilOptionIsAnErrorEverywhere(t *testing.T) {
	guards := func(string) (*sluice.Guard, error) { return nil, nil }
	for name, build := range map[string]func() error{
		"sluice.New": func() error { _, err := sluice.New(nil); return err },
		"ratelimit":  func() error { _, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1, nil); return err },
		"breaker":    func() error { _, err := breaker.New("b", nil); return err },
		"adaptive":   func() error { _, err := adaptive.NewShedder(nil); return err },
		"degrade.NewSwitch": func() error {
			_, err := degrade.NewSwitch("s", nil)
			return err
		},
		"degrade.NewStale": func() error { _, err := degrade.NewStale[int](time.Minute, 1, nil); return err },
		"middleware.NewIPExtractor": func() error {
			_, err := middleware.NewIPExtractor(nil)
			return err
		},
		"rules.New": func() error {
			path := filepath.Join(t.TempDir(), "rules.yaml")
			rule := "guards:\n  a:\n    policies:\n      - {name: a, kind: token-bucket, rate: 1/s, burst: 1}\ndefault: a\n"
			if err := os.WriteFile(path, []byte(rule), 0o644); err != nil {
				t.Fatal(err)
			}
			l, err := rules.New(path, nil)
			if err == nil {
				_ = l.Close()
			}
			return err
		},
		"middleware.NewRoutes": func() error { _, err := middleware.NewRoutes(middleware.RoutesOption{}); return err },
		"sluicehttp.Transport": func() error {
			_, err := sluicehttp.Transport(http.DefaultTransport, guards, nil)
			return err
		},
		"sluicegrpc": func() error {
			g, err := sluice.New()
			if err != nil {
				return nil
			}
			var icpt grpc.UnaryServerInterceptor
			icpt, err = sluicegrpc.UnaryServerInterceptor(sluicegrpc.WithGuard(g), nil)
			_ = icpt
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := build()
			if err == nil || !strings.Contains(err.Error(), "nil") {
				t.Fatalf("got %v, want an error about the nil option", err)
			}
		})
	}
}
