package adaptive

import (
	"context"
	"testing"

	"github.com/sluice-go/sluice/internal/shedhook"
)

// While one call of an old bulkhead runs (a long stream), reloads go on
// making bulkheads anew: the one in force still counts that call, but its
// chain of predecessors stays short, its idle ones skipped, so an Admit
// does not walk every reload made since the call began.
func TestALongCallKeepsTheCarryChainShort(t *testing.T) {
	s, err := NewBulkhead(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Admit(context.Background(), 0); err != nil { // a stream, held open
		t.Fatal(err)
	}
	for range 2000 {
		n, err := NewBulkhead(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		shedhook.Carry(s, n)
		s = n
	}
	if got := s.carried(); got != 1 {
		t.Errorf("the bulkhead in force counts %d calls of its predecessors, want the one still running", got)
	}
	depth := 0
	for p := s.pred.Load(); p != nil; p = p.pred.Load() {
		depth++
	}
	if depth > maxCarried+1 {
		t.Errorf("after 2000 reloads the bulkhead in force walks %d predecessors on each Admit; want at most %d", depth, maxCarried+1)
	}
}
