package scenario

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-go/sluice"
)

// TestCausesThroughExecute plays the causes table through sluice.Execute,
// Guard.Do with a value: each fallback answers with its text as the value.
func TestCausesThroughExecute(t *testing.T) {
	RunCauses(t, func(text string) string { return text }, func(t *testing.T, g *sluice.Guard) func(Work) string {
		return func(w Work) string {
			v, err := sluice.Execute(context.Background(), g, func(ctx context.Context) (string, error) {
				switch w {
				case Fail:
					return "", errors.New("down")
				case Hang:
					<-ctx.Done()
					return "", ctx.Err()
				}
				return "ok", nil
			})
			if err != nil {
				return Failed(err)
			}
			return v
		}
	})
}
