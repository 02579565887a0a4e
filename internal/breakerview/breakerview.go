// Package breakerview lets the observers (the dashboard, the metrics) read
// a breaker of another engine, breaker/gobreakeradapter's, as they read a
// breaker.Breaker: its State and Counts, without a method for them in the
// engine's API.
package breakerview

import "github.com/sluice-go/sluice/breaker"

// Breaker is what the observers read of a circuit breaker.
type Breaker interface {
	State() breaker.State
	Counts() breaker.Counts
}

var views []func(p any) (Breaker, bool)

// Register adds a view of the breakers of an engine: f returns p's, and
// false for a p of another kind. It is called from an init function.
func Register(f func(p any) (Breaker, bool)) { views = append(views, f) }

// Of returns what the observers read p by: a view of p when p is a
// breaker of a registered engine, p itself otherwise.
func Of(p any) any {
	for _, f := range views {
		if b, ok := f(p); ok {
			return b
		}
	}
	return p
}
