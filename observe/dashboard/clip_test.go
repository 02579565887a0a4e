package dashboard

import (
	"strings"
	"testing"
)

// clip cuts s to at most 200 bytes, its cut mark "…" (3 bytes) included.
func TestClipKeepsToItsBound(t *testing.T) {
	for _, s := range []string{strings.Repeat("a", 300), strings.Repeat("é", 150)} {
		if got := clip(s); len(got) > 200 {
			t.Errorf("clip of %d bytes gave %d bytes, more than 200", len(s), len(got))
		}
	}
}
