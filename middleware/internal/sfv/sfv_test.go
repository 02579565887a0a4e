package sfv

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseList(t *testing.T) {
	items, err := ParseList(`"per-ip";q=100;w=60, "b\"x";r=0;t=7, tok;f=?1`)
	require.NoError(t, err)
	require.Len(t, items, 3)
	assert.Equal(t, "per-ip", items[0].Value)
	q, ok := items[0].Int("q")
	assert.True(t, ok)
	assert.EqualValues(t, 100, q)
	assert.Equal(t, `b"x`, items[1].Value)
	r, _ := items[1].Int("r")
	assert.EqualValues(t, 0, r)
	assert.Equal(t, "tok", items[2].Value)
	assert.Equal(t, true, items[2].Params["f"])

	for _, bad := range []string{`"open`, `"a";q=`, `"a",`, `"a" "b"`, `"a";Q=1`, "\"a\x01\""} {
		_, err := ParseList(bad)
		assert.Error(t, err, bad)
	}
}
