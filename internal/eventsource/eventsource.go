// Package eventsource tells which Redis limiter sent an event, for the
// dashboard's observer: limiters may share a name, and an event names only
// its limiter. It keeps the sender out of the limiter's public Event.
package eventsource

// Of returns the limiter that sent e, a redislimit.Event, or nil for an
// event no limiter sent. Package redislimit sets it when it is
// initialised.
var Of func(e any) any
