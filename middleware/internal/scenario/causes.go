package scenario

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/middleware/internal/testpolicy"
)

// Work is what the protected call of a CauseStep does once admitted.
type Work int

const (
	// Succeed answers with success (Do: nil; HTTP 200 "ok"; gRPC "ok").
	Succeed Work = iota
	// Fail answers with a failure (Do: an error; HTTP 500; Echo: an
	// error; gRPC Unavailable).
	Fail
	// Hang waits for its context to end, the Guard's timeout, then gives
	// up (Do and Echo: the context's error; net/http: returns without
	// writing; gRPC: DeadlineExceeded).
	Hang
)

// CauseTimeout is the call timeout of the causes table's Guard.
const CauseTimeout = time.Second

// CauseStep is one call of the causes table: the cause its Guard's gate
// rejects it with (CauseNone: admitted), what the call then does, and what
// the caller gets.
type CauseStep struct {
	Reject sluice.Cause
	Work   Work
	// Want is the answer: "ok" from the call, or a fallback's answer
	// (FallbackAnswer of the cause; "fallback * failure" for a failure).
	Want string
	// Outcome is what the Guard's policies heard of the call: Released for a
	// rejection, Failure for a failure or a timeout.
	Outcome sluice.Outcome
}

// failureAnswer is the answer of the fallback for a call's own failure.
const failureAnswer = fallbackPrefix + "* failure"

// CauseSteps is the causes table: one call per cause of a rejection, a
// timeout and a failure, each answered by the Guard's fallback declared
// for it, and an admitted call that succeeds.
func CauseSteps() []CauseStep {
	answer := func(c sluice.Cause) string { return FallbackAnswer(Fallback{Cause: c}) }
	return []CauseStep{
		{Work: Succeed, Want: "ok", Outcome: sluice.Success},
		{Reject: sluice.CauseRateLimited, Want: answer(sluice.CauseRateLimited), Outcome: sluice.Released},
		{Reject: sluice.CauseCircuitOpen, Want: answer(sluice.CauseCircuitOpen), Outcome: sluice.Released},
		{Reject: sluice.CauseOverloaded, Want: answer(sluice.CauseOverloaded), Outcome: sluice.Released},
		{Reject: sluice.CauseConcurrencyLimited, Want: answer(sluice.CauseConcurrencyLimited), Outcome: sluice.Released},
		{Work: Hang, Want: answer(sluice.CauseTimeout), Outcome: sluice.Failure},
		{Work: Fail, Want: failureAnswer, Outcome: sluice.Failure},
		{Work: Succeed, Want: "ok", Outcome: sluice.Success},
	}
}

// causeErrors are the rejections the gate answers with, per cause.
var causeErrors = map[sluice.Cause]error{
	sluice.CauseRateLimited:        sluice.ErrRateLimited,
	sluice.CauseCircuitOpen:        sluice.ErrCircuitOpen,
	sluice.CauseOverloaded:         sluice.ErrOverloaded,
	sluice.CauseConcurrencyLimited: sluice.ErrConcurrencyLimited,
}

// gate rejects each call with the cause of the step being played.
type gate struct{ cause sluice.Cause }

func (*gate) Name() string { return "test/gate" }
func (g *gate) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	if g.cause == sluice.CauseNone {
		return 0, sluice.Quota{Limit: -1}, nil
	}
	return 0, sluice.Quota{Limit: -1, RetryAfter: time.Second}, causeErrors[g.cause]
}
func (*gate) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (*gate) Needs() sluice.Needs                                              { return 0 }

// CauseFallbacks returns the fallbacks of the causes table, answering with
// answer(text): one per cause of a rejection, one for a timeout, one for
// any other failure.
func CauseFallbacks[T any](answer func(text string) T) (*degrade.Fallbacks[T], error) {
	rule := func(on func(degrade.Func[T]) degrade.Rule[T], text string) degrade.Rule[T] {
		return on(degrade.Value(answer(text)))
	}
	a := func(c sluice.Cause) string { return FallbackAnswer(Fallback{Cause: c}) }
	return degrade.New(
		rule(degrade.OnRateLimited[T], a(sluice.CauseRateLimited)),
		rule(degrade.OnCircuitOpen[T], a(sluice.CauseCircuitOpen)),
		rule(degrade.OnOverloaded[T], a(sluice.CauseOverloaded)),
		rule(degrade.OnConcurrencyLimited[T], a(sluice.CauseConcurrencyLimited)),
		rule(degrade.OnTimeout[T], a(sluice.CauseTimeout)),
		rule(degrade.OnError[T], failureAnswer),
	)
}

// CauseTarget builds an entry point around g and returns the function that
// makes one call through it, whose protected call does w, and returns what
// the caller got: the answer on success ("ok", a fallback's text), else a
// text that says how it failed.
type CauseTarget func(t *testing.T, g *sluice.Guard) func(w Work) string

// RunCauses plays the causes table through target, in a synctest bubble
// (the Guard's timeout is on the bubble's clock): one Guard, with a
// fallback per cause answering with answer(text) and a timeout.
func RunCauses[T any](t *testing.T, answer func(text string) T, target CauseTarget) {
	synctest.Test(t, func(t *testing.T) {
		fb, err := CauseFallbacks(answer)
		require.NoError(t, err)
		gt, counter := &gate{}, testpolicy.NewCounter()
		g, err := sluice.New(sluice.With(counter, gt), sluice.WithTimeout(CauseTimeout), sluice.WithFallback(fb))
		require.NoError(t, err)
		call := target(t, g)
		for i, st := range CauseSteps() {
			gt.cause = st.Reject
			before := counter.Outcomes()
			got := call(st.Work)
			heard := map[sluice.Outcome]int{}
			for o, n := range counter.Outcomes() {
				if d := n - before[o]; d != 0 {
					heard[o] = d
				}
			}
			require.Equal(t, st.Want, got, "step %d: %+v", i, st)
			require.Equal(t, map[sluice.Outcome]int{st.Outcome: 1}, heard, "step %d: %+v", i, st)
		}
	})
}

type workKey struct{}

// WithWork returns ctx telling the protected call what to do, for handlers
// that take no argument of the target's own.
func WithWork(ctx context.Context, w Work) context.Context {
	return context.WithValue(ctx, workKey{}, w)
}

// WorkFrom returns the Work of WithWork in ctx; Succeed when none is set.
func WorkFrom(ctx context.Context) Work {
	w, _ := ctx.Value(workKey{}).(Work)
	return w
}

// ServeWork serves GET /a with h for a call doing w, and returns the body
// of a 200 answer, else Failed with the status.
func ServeWork(h http.Handler, w Work) string {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(WithWork(context.Background(), w), http.MethodGet, "/a", nil))
	if rec.Code != http.StatusOK {
		return Failed(rec.Code)
	}
	return rec.Body.String()
}

// Failed is the answer a target reports for a call that failed without a
// fallback's answer: how it failed.
func Failed(how any) string { return fmt.Sprintf("failed: %v", how) }
