package reqid

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A lent context carries its resource, and only one given back is reset:
// a context kept, or seen by a Guard's observers, stays as it was.
func TestLentContextsGoBackOnlyWhenNothingKeepsThem(t *testing.T) {
	observed := false
	defer func(f func(any) bool) { Observed = f }(Observed)
	Observed = func(any) bool { return observed }
	base := context.Background()

	kept := Keep(Lend(base, "/svc/Kept"))
	GiveBack(kept, nil)
	res, ok := Resource(kept)
	assert.True(t, ok)
	assert.Equal(t, "/svc/Kept", res)

	observed = true
	seen := Lend(base, "/svc/Seen")
	GiveBack(seen, nil)
	res, ok = Resource(seen)
	assert.True(t, ok, "an observer may still read it")
	assert.Equal(t, "/svc/Seen", res)

	observed = false
	back := Lend(base, "/svc/Back")
	GiveBack(back, nil)
	assert.Equal(t, idCtx{}, *back.(*idCtx), "given back, it is reset for its next loan")

	GiveBack(WithResource(base, "/svc/Own"), nil) // not lent: left alone
	GiveBack(base, nil)
}
