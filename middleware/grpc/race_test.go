//go:build race

package sluicegrpc

// raceEnabled: the race detector makes sync.Pool drop a share of what it is
// given, so a client call's lent context is now and then made afresh.
const raceEnabled = true
