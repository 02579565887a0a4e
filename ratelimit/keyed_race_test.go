//go:build race

package ratelimit

// raceEnabled reports that the race detector is on: the heaviest tests
// scale their volume down by ten, keeping their ratios.
const raceEnabled = true
