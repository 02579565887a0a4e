//go:build !unix

package main

import "time"

// processCPU would be the CPU time this process has used; without
// getrusage it is unknown, and the work calibration falls back to a
// fixed amount.
func processCPU() time.Duration { return 0 }
