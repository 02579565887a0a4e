package sluicegrpc

import (
	"errors"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrorDomain is the domain of the errdetails.ErrorInfo that every sluice
// rejection carries.
const ErrorDomain = "sluice"

// MetadataPolicy is the key, in the ErrorInfo's metadata, of the name of the
// policy that rejected.
const MetadataPolicy = "policy"

// The ErrorInfo reasons, one per cause, in the UPPER_SNAKE_CASE that
// google.rpc.ErrorInfo asks for.
const (
	ReasonRateLimited        = "RATE_LIMITED"
	ReasonCircuitOpen        = "CIRCUIT_OPEN"
	ReasonOverloaded         = "OVERLOADED"
	ReasonConcurrencyLimited = "CONCURRENCY_LIMITED"
	ReasonTimeout            = "TIMEOUT"
	ReasonRejected           = "REJECTED"
)

// Code returns the gRPC code a rejection with cause c is answered with: rate
// limited is ResourceExhausted; circuit open, overloaded and concurrency
// limited are Unavailable; a timeout is DeadlineExceeded. Any other cause is
// Unavailable.
func Code(c sluice.Cause) codes.Code {
	switch c {
	case sluice.CauseRateLimited:
		return codes.ResourceExhausted
	case sluice.CauseTimeout:
		return codes.DeadlineExceeded
	}
	return codes.Unavailable
}

// Reason returns the ErrorInfo reason of cause c: "RATE_LIMITED",
// "CIRCUIT_OPEN", "OVERLOADED", "CONCURRENCY_LIMITED", "TIMEOUT", or
// "REJECTED" for CauseNone.
func Reason(c sluice.Cause) string {
	switch c {
	case sluice.CauseRateLimited:
		return ReasonRateLimited
	case sluice.CauseCircuitOpen:
		return ReasonCircuitOpen
	case sluice.CauseOverloaded:
		return ReasonOverloaded
	case sluice.CauseConcurrencyLimited:
		return ReasonConcurrencyLimited
	case sluice.CauseTimeout:
		return ReasonTimeout
	}
	return ReasonRejected
}

func causeOfReason(reason string) (error, sluice.Cause) {
	switch reason {
	case ReasonRateLimited:
		return sluice.ErrRateLimited, sluice.CauseRateLimited
	case ReasonCircuitOpen:
		return sluice.ErrCircuitOpen, sluice.CauseCircuitOpen
	case ReasonOverloaded:
		return sluice.ErrOverloaded, sluice.CauseOverloaded
	case ReasonConcurrencyLimited:
		return sluice.ErrConcurrencyLimited, sluice.CauseConcurrencyLimited
	case ReasonTimeout:
		return sluice.ErrTimeout, sluice.CauseTimeout
	}
	return nil, sluice.CauseNone
}

// message names the cause and, when known, the delay; never an error text.
func message(c sluice.Cause, retryAfter time.Duration) string {
	var b strings.Builder
	b.WriteString("sluice: ")
	if c == sluice.CauseNone {
		b.WriteString("rejected")
	} else {
		b.WriteString(strings.ReplaceAll(c.String(), "-", " "))
	}
	if retryAfter > 0 {
		b.WriteString("; retry after ")
		b.WriteString(retryAfter.String())
	}
	return b.String()
}

// RejectionStatus returns the gRPC status that answers the rejection d: the
// code of its cause (see [Code]), a message naming the cause and the delay,
// an errdetails.RetryInfo with d.RetryAfter (one second when the policy
// cannot know it, as the HTTP adapters' Retry-After), and an
// errdetails.ErrorInfo whose reason names the cause (see [Reason]), whose
// domain is [ErrorDomain] and whose metadata holds the policy's name under
// [MetadataPolicy].
func RejectionStatus(d sluice.Decision) *status.Status {
	return rejectionStatus(d, Code(sluice.CauseOf(d.Cause)))
}

func rejectionStatus(d sluice.Decision, code codes.Code) *status.Status {
	c := sluice.CauseOf(d.Cause)
	delay := retryDelay(d)
	p := &spb.Status{Code: int32(code), Message: message(c, delay)}
	if a, err := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); err == nil {
		p.Details = append(p.Details, a)
	}
	info := &errdetails.ErrorInfo{Reason: Reason(c), Domain: ErrorDomain}
	if d.Policy != "" {
		info.Metadata = map[string]string{MetadataPolicy: d.Policy}
	}
	if a, err := anypb.New(info); err == nil {
		p.Details = append(p.Details, a)
	}
	return status.FromProto(p)
}

// rejection is the error the interceptors return for their own rejections:
// gRPC reads its status, and errors.Is matches it with sluice.ErrRejected and
// its cause, so that an outer guard does not count it.
type rejection struct {
	rej *sluice.RejectedError
	st  *status.Status
}

func (e *rejection) Error() string              { return e.st.Err().Error() }
func (e *rejection) GRPCStatus() *status.Status { return e.st }
func (e *rejection) Unwrap() error              { return e.rej }
func newRejection(d sluice.Decision) *rejection {
	return newRejectionCode(d, Code(sluice.CauseOf(d.Cause)))
}
func (e *rejection) Is(target error) bool { return target == sluice.ErrRejected }
func newRejectionCode(d sluice.Decision, code codes.Code) *rejection {
	return &rejection{rej: &sluice.RejectedError{Decision: d}, st: rejectionStatus(d, code)}
}

// Error converts a sluice rejection (an error matching sluice.ErrRejected and
// carrying a *sluice.RejectedError) into an error that gRPC sends as
// [RejectionStatus] of its Decision, and that still matches
// sluice.ErrRejected and its cause with errors.Is. Any other error, nil
// included, is returned as it is. A handler that runs its own Guard returns
// Error(err) to answer its rejections as the interceptors do.
func Error(err error) error {
	var r *rejection
	if errors.As(err, &r) {
		return err
	}
	var re *sluice.RejectedError
	if !errors.As(err, &re) {
		return err
	}
	return newRejection(re.Decision)
}

// RejectionOf reads back a rejection from a sluice server out of err, a
// gRPC status error: the Decision it carried (not allowed, its policy, its
// RetryAfter, its cause as one of sluice's errors, Limit -1), and true. It
// reports false when err carries no sluice ErrorInfo. RetryAfter is the
// delay the status announced, one second when the policy could not know it. A client can use it to
// tell a peer's rate limit or overload from other failures.
func RejectionOf(err error) (sluice.Decision, bool) {
	if err == nil {
		return sluice.Decision{}, false
	}
	var r *rejection
	if errors.As(err, &r) {
		d := r.rej.Decision
		d.RetryAfter = retryDelay(d)
		return d, true
	}
	st, ok := status.FromError(err)
	if !ok {
		return sluice.Decision{}, false
	}
	d := sluice.Decision{Limit: -1}
	found := false
	for _, det := range st.Details() {
		switch v := det.(type) {
		case *errdetails.ErrorInfo:
			if v.GetDomain() != ErrorDomain {
				continue
			}
			found = true
			d.Policy = v.GetMetadata()[MetadataPolicy]
			cause, _ := causeOfReason(v.GetReason())
			if cause == nil {
				cause = sluice.ErrRejected
			}
			d.Cause = cause
		case *errdetails.RetryInfo:
			if v.GetRetryDelay() != nil {
				d.RetryAfter = v.GetRetryDelay().AsDuration()
			}
		}
	}
	if !found {
		return sluice.Decision{}, false
	}
	return d, true
}
