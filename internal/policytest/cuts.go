package policytest

import (
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/shedhook"
)

// RecordCuts replaces shedhook.CutShort, for the rest of the test, with one
// that records the outcomes of the calls the Guard tells as cut short by a
// deadline and declines them (the policy's Done then hears them, as for any
// end); it returns what was recorded so far. The test must not run in
// parallel with others that end calls.
func RecordCuts(t testing.TB) func() []sluice.Outcome {
	t.Helper()
	var mu sync.Mutex
	var cut []sluice.Outcome
	old := shedhook.CutShort
	t.Cleanup(func() { shedhook.CutShort = old })
	shedhook.CutShort = func(_ any, _ uint64, o uint8, _, _ time.Duration) bool {
		mu.Lock()
		cut = append(cut, sluice.Outcome(o))
		mu.Unlock()
		return false
	}
	return func() []sluice.Outcome {
		mu.Lock()
		defer mu.Unlock()
		return append([]sluice.Outcome(nil), cut...)
	}
}
