// Package gobreakeradapter runs a sony/gobreaker v2 circuit breaker as a
// sluice.Policy, so a Guard, and every sluice middleware, can use a breaker
// that a team has already tuned with gobreaker's Settings.
//
// New builds the gobreaker.TwoStepCircuitBreaker from the team's Settings
// itself, so it can exclude the calls that say nothing about the dependency
// (Ignored and Released outcomes), tell a rejected caller when the breaker
// will let a probe through, and report state changes outside gobreaker's
// lock. (A breaker made elsewhere could do none of these, and would count
// every ignored call as a failure unless its Settings said otherwise: there
// is no way to wrap one.)
//
// This package lives apart from package breaker so that the core packages
// depend on the standard library only. See package breaker's documentation
// for when to pick which engine.
package gobreakeradapter
