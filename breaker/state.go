package breaker

import (
	"strconv"
	"time"
)

// State is a breaker's state. The zero value is StateClosed.
type State uint8

const (
	// StateClosed lets calls through and counts their outcomes.
	StateClosed State = iota
	// StateOpen rejects calls until its open duration is over.
	StateOpen
	// StateHalfOpen lets a few probe calls through and rejects the rest; the
	// probes' outcomes close or reopen the breaker.
	StateHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateOpen:
		return "open"
	case StateHalfOpen:
		return "half-open"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Counts is a snapshot of a breaker's counters. Its zero value is an empty
// window.
type Counts struct {
	// Requests is the number of calls in the window that ended with Success
	// or Failure; Ignored and Released calls are not counted.
	Requests int64
	// Successes and Failures split Requests.
	Successes, Failures int64
	// SlowCalls is the number of calls in the window slower than the
	// slow-call threshold, whatever their outcome; 0 without
	// WithSlowCallRatio.
	SlowCalls int64
	// ConsecutiveFailures is the length of the current run of failures.
	ConsecutiveFailures int64
	// ProbesAdmitted, ProbeSuccesses and ProbeFailures describe the half-open
	// state's probes; all 0 in the other states.
	ProbesAdmitted, ProbeSuccesses, ProbeFailures int64
	// NextProbe is, while the breaker is open, the time left until it turns
	// half-open at the next call and admits probes; 0 once that time is
	// over, in the other states, and while forced open (ForceOpen), which
	// never probes.
	NextProbe time.Duration
	// Forced is set while ForceOpen or ForceClose holds the breaker in its
	// state: nothing trips or closes it until Reset.
	Forced bool
}
