// Package shedhook reaches, for package rules, what package adaptive does
// not export.
package shedhook

// Carry makes the *adaptive.Shedder to count the calls in flight of the
// *adaptive.Shedder from, which it takes the place of (a live rules reload
// that made a bulkhead anew): until they end, they hold to's slots as its
// own calls do, and their ends free them. Set by package adaptive.
var Carry func(from, to any)
