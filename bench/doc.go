// Package bench holds side-by-side benchmarks of sluice and peer libraries.
// It is its own module so the peers never enter sluice's dependencies.
package bench
