package sluice

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/sluice-go/sluice/internal/timeouterr"
)

// The causes of a rejection. A policy's rejection matches ErrRejected and
// exactly one of the others with errors.Is; RejectionOf reads its Decision.
var (
	// ErrRejected matches every rejection by a sluice policy.
	ErrRejected = errors.New("sluice: rejected")
	// ErrRateLimited: a rate limit's quota is spent (HTTP 429, gRPC
	// ResourceExhausted).
	ErrRateLimited = errors.New("sluice: rate limited")
	// ErrCircuitOpen: a circuit breaker is open, or is half-open with all its
	// probes taken (HTTP 503, gRPC Unavailable).
	ErrCircuitOpen = errors.New("sluice: circuit open")
	// ErrOverloaded: the system-load guard is shedding (HTTP 503, gRPC
	// Unavailable).
	ErrOverloaded = errors.New("sluice: overloaded")
	// ErrConcurrencyLimited: a concurrency limit is reached and its queue, if
	// any, is full or its wait ran out (HTTP 503, gRPC Unavailable).
	ErrConcurrencyLimited = errors.New("sluice: concurrency limited")
	// ErrTimeout: a call ran past its timeout policy's deadline. It is a
	// failure, not a rejection: breakers count it, fallbacks can catch it. A
	// timeout error also matches context.DeadlineExceeded.
	ErrTimeout = timeouterr.ErrTimeout
)

// Rejection returns the error of a rejection with Decision d: it matches
// ErrRejected and d.Cause with errors.Is, and [RejectionOf] returns d. Its
// text names the policy and the cause, never an error text of a call.
//
// A Guard does not call it for each rejection: it keeps one error per policy
// and per answer, shared by the rejections that differ only in the instant
// they came, so a flood of rejections allocates nothing.
func Rejection(d Decision) error { return &rejectedError{d: d} }

// rejectedError is the error of every rejection. A Guard's shares one value
// among the rejections of one policy whose answers agree to the millisecond
// (see Guard.rejection): RetryAfter and Reset are then kept as instants on
// the Guard's clock, and the Decision is read relative to when it is read.
type rejectedError struct {
	d        Decision
	g        *Guard        // nil: d is as given
	retryAt  time.Duration // with g: the instant RetryAfter counts down to
	resetAt  time.Duration // with g: the instant Reset counts down to
	hasRetry bool
}

// decision returns the Decision; for a Guard's shared error, RetryAfter and
// Reset count from now on the Guard's clock, and never below 1ms while the
// instant they count to has not passed at the rejection.
func (e *rejectedError) decision() Decision {
	d := e.d
	if e.g == nil {
		return d
	}
	now := e.g.now()
	if e.hasRetry {
		d.RetryAfter = max(e.retryAt-now, 0)
	}
	if d.Reset > 0 {
		d.Reset = max(e.resetAt-now, 0)
	}
	return d
}

// Error names the policy and the cause; it never carries an error text from
// the protected call.
func (e *rejectedError) Error() string {
	d := e.decision()
	var b strings.Builder
	b.WriteString("sluice: ")
	b.WriteString(causeText(d.Cause))
	if d.Policy != "" {
		b.WriteString(" by ")
		b.WriteString(d.Policy)
	}
	if d.RetryAfter > 0 {
		b.WriteString("; retry after ")
		b.WriteString(d.RetryAfter.String())
	}
	return b.String()
}

// Is reports whether target is ErrRejected.
func (e *rejectedError) Is(target error) bool { return target == ErrRejected }

// Unwrap returns the cause, so errors.Is(err, ErrRateLimited) and the like
// work.
func (e *rejectedError) Unwrap() error { return e.d.Cause }

func causeText(cause error) string {
	switch {
	case cause == nil:
		return "rejected"
	case errors.Is(cause, ErrRateLimited):
		return "rate limited"
	case errors.Is(cause, ErrCircuitOpen):
		return "circuit open"
	case errors.Is(cause, ErrOverloaded):
		return "overloaded"
	case errors.Is(cause, ErrConcurrencyLimited):
		return "concurrency limited"
	case errors.Is(cause, ErrTimeout):
		return "timeout"
	}
	return "rejected"
}

// Cause is the cause of a rejection, for adapters that map it to the wire.
type Cause uint8

const (
	// CauseNone: no rejection, or not a sluice error.
	CauseNone Cause = iota
	// CauseRateLimited: ErrRateLimited.
	CauseRateLimited
	// CauseCircuitOpen: ErrCircuitOpen.
	CauseCircuitOpen
	// CauseOverloaded: ErrOverloaded.
	CauseOverloaded
	// CauseConcurrencyLimited: ErrConcurrencyLimited.
	CauseConcurrencyLimited
	// CauseTimeout: ErrTimeout.
	CauseTimeout
)

// String returns the cause in lower case with dashes: "rate-limited".
func (c Cause) String() string {
	switch c {
	case CauseRateLimited:
		return "rate-limited"
	case CauseCircuitOpen:
		return "circuit-open"
	case CauseOverloaded:
		return "overloaded"
	case CauseConcurrencyLimited:
		return "concurrency-limited"
	case CauseTimeout:
		return "timeout"
	}
	return "none"
}

// CauseOf classifies err by the sentinel it matches; CauseNone when it
// matches none. A timeout comes first, as in DefaultClassifier: a call that
// ran past its Guard's deadline while waiting in an inner Guard returns a
// timeout error wrapping the inner rejection, and is a timeout.
func CauseOf(err error) Cause {
	switch {
	case err == nil:
		return CauseNone
	case errors.Is(err, ErrTimeout):
		return CauseTimeout
	case errors.Is(err, ErrRateLimited):
		return CauseRateLimited
	case errors.Is(err, ErrCircuitOpen):
		return CauseCircuitOpen
	case errors.Is(err, ErrOverloaded):
		return CauseOverloaded
	case errors.Is(err, ErrConcurrencyLimited):
		return CauseConcurrencyLimited
	}
	return CauseNone
}

// Classifier decides what an error returned by a protected call says about
// the health of what it called. A Guard asks it only for errors: a call that
// returns nil is always a Success. A call whose caller canceled its context
// with a cause (context.WithCancelCause, as errgroup does) and that returned
// the cause in place of context.Canceled, as net/http does, is handed to it
// as an error that matches context.Canceled and unwraps to the cause.
type Classifier func(err error) Outcome

// classifiable returns what a Classifier is told of err, the error of a call
// whose context is cctx: see Classifier.
func classifiable(cctx context.Context, err error) error {
	if cctx == nil || cctx.Err() != context.Canceled {
		return err
	}
	if cause := context.Cause(cctx); cause != context.Canceled && cause != nil && errors.Is(err, cause) {
		return canceledBy{err}
	}
	return err
}

// canceledBy is an error a call returned that is the cause its caller
// canceled it with: it matches context.Canceled.
type canceledBy struct{ error }

func (e canceledBy) Is(target error) bool { return target == context.Canceled }
func (e canceledBy) Unwrap() error        { return e.error }

// isCanceledBy reports whether err is what classifiable made of a call's
// error that was its caller's cause.
func isCanceledBy(err error) bool {
	_, ok := err.(canceledBy)
	return ok
}

// DefaultClassifier is the Classifier a Guard uses unless told otherwise:
// nil is Success; a sluice rejection (from this Guard's policies or a nested
// one) and context.Canceled are Ignored; every other error, a timeout
// included, is Failure.
func DefaultClassifier(err error) Outcome {
	switch {
	case err == nil:
		return Success
	case isCanceledBy(err):
		// The cause its caller canceled it with, whatever that cause is
		// (a sibling's timeout, in an errgroup): the caller's cancel.
		return Ignored
	case rejectionOf(err) != nil:
		// A nested Guard's rejection, whatever its cause (a policy may
		// reject with ErrTimeout), but not a timeout wrapping one.
		return Ignored
	case errors.Is(err, ErrTimeout):
		// Before Canceled: a call past its Guard's deadline may have
		// answered with context.Canceled (as some drivers do); it is still a
		// timeout.
		return Failure
	case errors.Is(err, ErrRejected), errors.Is(err, context.Canceled):
		return Ignored
	}
	return Failure
}
