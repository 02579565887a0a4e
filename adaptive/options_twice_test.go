package adaptive_test

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice/adaptive"
)

// An option given twice is an error, not the last silently winning.
func TestAnOptionGivenTwiceIsAnError(t *testing.T) {
	if s, err := adaptive.NewShedder(adaptive.WithQueue(10, time.Second), adaptive.WithQueue(500, 50*time.Millisecond)); err == nil {
		t.Errorf("NewShedder(WithQueue twice) = %v, nil error", s.Name())
	}
	if s, err := adaptive.NewBulkhead(4, adaptive.WithName("a"), adaptive.WithName("b")); err == nil {
		t.Errorf("NewBulkhead(WithName twice) named %q, nil error", s.Name())
	}
}
