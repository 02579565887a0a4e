package sluicehttp_test

import (
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
)

var errDrainedLate = errors.New("upstream draining")

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A Transport whose response classifier counts an error for nothing: past
// the Guard's deadline it goes back as itself (Report's contract: only a
// Failure, a rejection or a context's end is the timeout), the Transport's
// classifier, not the Guard's, deciding.
func TestTransportIgnoredErrorPastTheDeadlineStandsAsItIs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := sluice.New(sluice.WithName("up"), sluice.WithTimeout(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		next := rtFunc(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, errDrainedLate
		})
		rt, err := sluicehttp.Transport(next, func(string) (*sluice.Guard, error) { return g, nil },
			sluicehttp.WithResponseClassifier(func(resp *http.Response, err error) sluice.Outcome {
				if errors.Is(err, errDrainedLate) {
					return sluice.Ignored
				}
				return sluice.Failure
			}))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodGet, "http://up.test/x", nil)
		_, err = rt.RoundTrip(req)
		if errors.Is(err, sluice.ErrTimeout) || !errors.Is(err, errDrainedLate) {
			t.Fatalf("an error the Transport's classifier ignores went back past the deadline as %v, want it as itself", err)
		}
	})
}
