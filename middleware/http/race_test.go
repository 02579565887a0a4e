//go:build race

package sluicehttp

// raceEnabled: the race detector makes sync.Pool drop a share of what it is
// given, so pooled paths allocate now and then; allocation counts are checked
// without it.
const raceEnabled = true
