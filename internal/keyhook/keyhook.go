// Package keyhook lets the rules package tell a middleware.Keyer it builds
// the key its key functions give the requests without one, which is no
// client's, without an exported name for it.
package keyhook

// NoClient marks key as no client's for k, a *middleware.Keyer that rejects
// the requests without a key while some of its key functions give them a
// shared one (a rules file with guards of both kinds). Set by package
// middleware.
var NoClient func(k any, key string)
