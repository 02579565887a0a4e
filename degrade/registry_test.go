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

	rich, err := r.Switch("rich-fields")
	require.NoError(t, err)
	again, err := r.Switch("rich-fields")
	require.NoError(t, err)
	assert.Same(t, rich, again)
	_, err = r.Switch("")
	assert.ErrorContains(t, err, "empty name")

	got, ok := r.Get("recommendations")
	assert.True(t, ok)
	assert.Same(t, recs, got)

	flipped, err := r.Set("recommendations", true)
	require.NoError(t, err)
	assert.True(t, flipped)
	assert.True(t, recs.On())
	_, err = r.Set("missing", true)
	assert.ErrorContains(t, err, "no switch")

	flipped, err = r.Pin("recommendations", false)
	require.NoError(t, err)
	assert.True(t, flipped)
	assert.True(t, recs.Pinned())
	require.NoError(t, r.Unpin("recommendations"))
	assert.False(t, recs.Pinned())
	assert.False(t, recs.On(), "unpinned where it was pinned")
	_, err = r.Pin("missing", true)
	assert.ErrorContains(t, err, "no switch")
	assert.ErrorContains(t, r.Unpin("missing"), "no switch")

	assert.Equal(t, []string{"recommendations", "rich-fields"}, r.Names())
	assert.Equal(t, map[string]bool{"recommendations": false, "rich-fields": false}, r.States())
}

func TestRegistryConcurrentSwitch(t *testing.T) {
	var r degrade.Registry
	var wg sync.WaitGroup
	got := make([]*degrade.Switch, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := r.Switch("shared")
			assert.NoError(t, err)
			got[i] = s
			_ = r.States()
		}()
	}
	wg.Wait()
	for _, s := range got {
		assert.Same(t, got[0], s)
	}
}
