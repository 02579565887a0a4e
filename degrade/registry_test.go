package degrade_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/degrade"
)

func TestRegistry(t *testing.T) {
	var r degrade.Registry
	recs := newSwitch(t, "recommendations")
	require.NoError(t, r.Add(recs))
	assert.ErrorContains(t, r.Add(newSwitch(t, "recommendations")), "registered")
	assert.ErrorContains(t, r.Add(newSwitch(t, "x"), nil), "nil")
	assert.ErrorContains(t, r.Add(newSwitch(t, "y"), newSwitch(t, "y")), "registered")
	_, ok := r.Get("x")
	assert.False(t, ok, "a failed Add adds none")

	require.NoError(t, r.Add(newSwitch(t, "rich-fields")))

	got, ok := r.Get("recommendations")
	assert.True(t, ok)
	assert.Same(t, recs, got)

	_, ok = r.Get("missing")
	assert.False(t, ok)
	assert.Equal(t, map[string]bool{"recommendations": false, "rich-fields": false}, r.States())
}

func TestRegistryConcurrentAddAndStates(t *testing.T) {
	var r degrade.Registry
	var wg sync.WaitGroup
	errs := make([]error, 8)
	sws := make([]*degrade.Switch, len(errs))
	for i := range sws {
		sws[i] = newSwitch(t, "shared")
	}
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.Add(sws[i])
			_ = r.States()
		}()
	}
	wg.Wait()
	added := 0
	for _, err := range errs {
		if err == nil {
			added++
		}
	}
	assert.Equal(t, 1, added, "one name, one switch")
}
