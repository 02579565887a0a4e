// Package redisnote carries what a Redis limiter's observer hears from
// package redisdash to the dashboard, which keeps go-redis out of its own
// imports and has no public method for it.
package redisnote

import "time"

// Note is one event of a Redis limiter.
type Note struct {
	// Limiter is the limiter that sent the event, the policy a Guard
	// shown holds; nil for an event no limiter sent.
	Limiter any
	// Decider names what decided instead of Redis, as the limiter's
	// fallback decisions name it ("open", "closed", "local"); "" for an
	// event that is no decision.
	Decider string
	// Err is Redis's error; nil for an event that is no failed call.
	Err error
	// At is when the event came, on the wall clock.
	At time.Time
}

// Record hands n to the dashboard d. The dashboard sets it when it is
// initialised.
var Record func(d any, n Note)
