// Package timeouterr holds the error of a call that ran past a Guard's
// deadline, so that the adapters and degrade can read its fields while the
// public API shows only sluice.ErrTimeout.
package timeouterr

import (
	"context"
	"errors"
	"time"
)

// ErrTimeout is sluice.ErrTimeout.
var ErrTimeout = errors.New("sluice: timeout")

// Error is the error of a call that ran past the deadline set by
// sluice.WithTimeout. It matches ErrTimeout and context.DeadlineExceeded with
// errors.Is, and unwraps to the call's own error.
type Error struct {
	// After is the Guard's timeout.
	After time.Duration
	// Err is the error the call returned.
	Err error
}

// Error says the call timed out and after how long; it does not carry the
// call's error text.
func (e *Error) Error() string { return "sluice: timeout after " + e.After.String() }

// Is reports whether target is ErrTimeout or context.DeadlineExceeded.
func (e *Error) Is(target error) bool {
	return target == ErrTimeout || target == context.DeadlineExceeded
}

// Unwrap returns the call's own error.
func (e *Error) Unwrap() error { return e.Err }

// Timeout reports true, as net.Error does for timeouts.
func (e *Error) Timeout() bool { return true }
