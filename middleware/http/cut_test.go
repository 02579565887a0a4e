package sluicehttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/internal/policytest"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
)

// A handler behind the net/http middleware that the Guard's timeout
// (sluice.WithTimeout) ends, writing nothing (the middleware answers 504)
// or its own 5xx after the deadline, is a call a deadline ended: the Guard
// must tell its Shedder so (a bound, shedhook.CutShort), as the package
// doc says. The middleware reports the 504 it answers, or the handler's
// status, as its error: the Guard's timeout, mapped from it, tells the
// cut.
func TestGuardTimeoutIsACutShort(t *testing.T) {
	for _, name := range []string{"nothing written", "502 after the deadline"} {
		t.Run(name, func(t *testing.T) {
			cuts := policytest.RecordCuts(t)
			s, err := adaptive.NewShedder()
			if err != nil {
				t.Fatal(err)
			}
			g, err := sluice.New(sluice.With(s), sluice.WithTimeout(20*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			m, err := sluicehttp.Middleware(sluicehttp.WithGuard(g))
			if err != nil {
				t.Fatal(err)
			}
			h := m(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				<-r.Context().Done() // a dependency that hangs, called with the request's context
				if name != "nothing written" {
					w.WriteHeader(http.StatusBadGateway)
				}
			}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			if got := cuts(); len(got) != 1 {
				t.Errorf("status %d; calls told cut short: %v, want 1", rec.Code, got)
			}
		})
	}
}
