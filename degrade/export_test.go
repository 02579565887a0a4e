package degrade

import "time"

// Observe is Check with the reading v at the instant now, for the tests
// that step through readings.
func (a *Auto) Observe(now time.Duration, v float64) bool { return a.observe(now, v) }

// Len returns the number of keys remembered, expired ones included until
// they are looked up or pushed out.
func (s *Stale[T]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}
