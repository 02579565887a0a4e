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

// A parameter key starts with a lowercase letter or '*' (RFC 8941 §3.1.2).
func TestParamKeyStartsWithALetterOrStar(t *testing.T) {
	for _, in := range []string{`"a";1q=1`, `"a";_q=1`, `"a";-q=1`, `"a";.q=1`, `"a";9=1`} {
		if items, err := ParseList(in); err == nil {
			t.Errorf("ParseList(%q) = %+v, want an error", in, items)
		}
	}
	if _, err := ParseList(`"a";*q=1;q9._-*=2`); err != nil {
		t.Errorf("valid keys refused: %v", err)
	}
}

// An integer has at most 15 digits, its sign not counted (RFC 8941 §3.3.1).
func TestIntegerOfSixteenDigitsRefused(t *testing.T) {
	for _, in := range []string{`"a";q=1000000000000000`, `"a";q=-1000000000000000`} {
		if items, err := ParseList(in); err == nil {
			t.Errorf("ParseList(%q) = %+v, want an error", in, items)
		}
	}
	for _, in := range []string{`"a";q=999999999999999`, `"a";q=-999999999999999`} {
		if _, err := ParseList(in); err != nil {
			t.Errorf("ParseList(%q): %v", in, err)
		}
	}
}
