//go:build race

package sluiceecho

// raceEnabled: the race detector makes sync.Pool drop a share of what it is
// given, so pooled paths (Echo's contexts, sluice's header slabs) allocate
// now and then; allocation counts get a slack of one under it.
const raceEnabled = true
