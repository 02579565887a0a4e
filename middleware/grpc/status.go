package sluicegrpc

import (
	"errors"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/timeouterr"
)

// errorDomain is the domain of the errdetails.ErrorInfo that every sluice
// rejection carries.
const errorDomain = "sluice"

// metadataPolicy is the key, in the ErrorInfo's metadata, of the name of the
// policy that rejected.
const metadataPolicy = "policy"

// The ErrorInfo reasons, one per cause, in the UPPER_SNAKE_CASE that
// google.rpc.ErrorInfo asks for.
const (
	reasonRateLimited        = "RATE_LIMITED"
	reasonCircuitOpen        = "CIRCUIT_OPEN"
	reasonOverloaded         = "OVERLOADED"
	reasonConcurrencyLimited = "CONCURRENCY_LIMITED"
	reasonTimeout            = "TIMEOUT"
	reasonRejected           = "REJECTED"
)

// Code returns the gRPC code a rejection with cause c is answered with: rate
// limited is ResourceExhausted; circuit open, overloaded and concurrency
// limited are Unavailable; a timeout is DeadlineExceeded. Any other cause is
// Unavailable.
func codeOf(c sluice.Cause) codes.Code {
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
func reasonOf(c sluice.Cause) string {
	switch c {
	case sluice.CauseRateLimited:
		return reasonRateLimited
	case sluice.CauseCircuitOpen:
		return reasonCircuitOpen
	case sluice.CauseOverloaded:
		return reasonOverloaded
	case sluice.CauseConcurrencyLimited:
		return reasonConcurrencyLimited
	case sluice.CauseTimeout:
		return reasonTimeout
	}
	return reasonRejected
}

// causeOfReason returns the sluice error of an ErrorInfo reason, nil for an
// unknown one.
func causeOfReason(reason string) error {
	switch reason {
	case reasonRateLimited:
		return sluice.ErrRateLimited
	case reasonCircuitOpen:
		return sluice.ErrCircuitOpen
	case reasonOverloaded:
		return sluice.ErrOverloaded
	case reasonConcurrencyLimited:
		return sluice.ErrConcurrencyLimited
	case reasonTimeout:
		return sluice.ErrTimeout
	}
	return nil
}

// message names the cause and, when known, the delay; never an error text.
func message(c sluice.Cause, retryAfter time.Duration) string {
	var buf [80]byte
	b := append(buf[:0], "sluice: "...)
	b = append(b, causeText(c)...)
	if retryAfter > 0 {
		b = append(b, "; retry after "...)
		b = append(b, retryAfter.String()...)
	}
	return string(b)
}

// causeText is cause c in words: "rate limited", "circuit open".
func causeText(c sluice.Cause) string {
	switch c {
	case sluice.CauseRateLimited:
		return "rate limited"
	case sluice.CauseCircuitOpen:
		return "circuit open"
	case sluice.CauseOverloaded:
		return "overloaded"
	case sluice.CauseConcurrencyLimited:
		return "concurrency limited"
	case sluice.CauseTimeout:
		return "timeout"
	}
	return "rejected"
}

// rejectionStatus returns the gRPC status that answers the rejection d
// with code: a message naming the cause and the delay, an
// errdetails.RetryInfo with d.RetryAfter (one second when the policy
// cannot know it, as the HTTP adapters' Retry-After), and an
// errdetails.ErrorInfo whose reason names the cause, whose domain is
// "sluice" and whose metadata holds the policy's name under "policy".
func rejectionStatus(d sluice.Decision, code codes.Code) *status.Status {
	c := sluice.CauseOf(d.Cause)
	delay := retryDelay(d)
	p := &spb.Status{Code: int32(code), Message: message(c, delay), Details: []*anypb.Any{retryInfo(delay)}}
	if info := errorInfo(reasonOf(c), d.Policy); info != nil {
		p.Details = append(p.Details, info)
	}
	return status.FromProto(p)
}

const retryInfoURL = "type.googleapis.com/google.rpc.RetryInfo"

// retryInfo returns an errdetails.RetryInfo of delay as an Any, encoded by
// hand: RetryInfo{retry_delay: Duration{seconds, nanos}} is two varints in
// one nested message, and the rejection path stays cheap.
func retryInfo(delay time.Duration) *anypb.Any {
	var dur [24]byte
	b := dur[:0]
	if s := int64(delay / time.Second); s != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(s))
	}
	if n := int32(delay % time.Second); n != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(n))
	}
	v := make([]byte, 0, len(b)+4)
	v = protowire.AppendTag(v, 1, protowire.BytesType)
	v = protowire.AppendBytes(v, b)
	return &anypb.Any{TypeUrl: retryInfoURL, Value: v}
}

// errorInfos caches the encoded ErrorInfo of each reason and policy: they
// are few (one per configured policy and cause) and never change. Past
// maxErrorInfos entries, new ones are encoded for each rejection.
var (
	errorInfos     sync.Map // errorInfoKey → *anypb.Any
	errorInfoCount atomic.Int64
)

const maxErrorInfos = 4096

type errorInfoKey struct{ reason, policy string }

// errorInfo returns the errdetails.ErrorInfo of reason and policy as an Any,
// nil if it cannot be encoded. The Any is shared: status.FromProto copies it
// into each status. A policy name that is not valid UTF-8 (which a protobuf
// string cannot carry) has its invalid bytes replaced.
func errorInfo(reason, policy string) *anypb.Any {
	k := errorInfoKey{reason, policy}
	if a, ok := errorInfos.Load(k); ok {
		return a.(*anypb.Any)
	}
	info := &errdetails.ErrorInfo{Reason: reason, Domain: errorDomain}
	if policy != "" {
		info.Metadata = map[string]string{metadataPolicy: strings.ToValidUTF8(policy, "\uFFFD")}
	}
	a, err := anypb.New(info)
	if err != nil {
		return nil
	}
	if errorInfoCount.Load() < maxErrorInfos {
		if _, loaded := errorInfos.LoadOrStore(k, a); !loaded {
			errorInfoCount.Add(1)
		}
	}
	return a
}

// rejection is the error the interceptors return for their own rejections:
// gRPC reads its status, and errors.Is matches it with sluice.ErrRejected and
// its cause, so that an outer guard does not count it.
type rejection struct {
	rej error           // the Guard's rejection, as sluice.Rejection makes it
	d   sluice.Decision // rej's Decision, as of the rejection
	st  *status.Status
	msg string // st's error text, as gRPC's status error has it
	// client is set for the answer of an interceptor that sets no
	// server's trailers (a client's): a handler that returns it is
	// answered as its server interceptor answers its own rejections. A
	// server interceptor's answer, on a route or unguarded, set them.
	client bool
}

func (e *rejection) Error() string              { return e.msg }
func (e *rejection) GRPCStatus() *status.Status { return e.st }
func (e *rejection) Unwrap() error              { return e.rej }
func (e *rejection) Is(target error) bool       { return target == sluice.ErrRejected }

// newRejection returns the rejection of err, a Guard's rejection with
// Decision d (one is made when err is none), answered with the code of its
// cause.
func newRejection(err error, d sluice.Decision) *rejection {
	return newRejectionCode(err, d, codeOf(sluice.CauseOf(d.Cause)))
}

// newRejectionCode is newRejection answered with code.
func newRejectionCode(err error, d sluice.Decision, code codes.Code) *rejection {
	if !isGuardRejection(err) {
		err = sluice.Rejection(d)
	}
	st := rejectionStatus(d, code)
	return &rejection{rej: err, d: d, st: st, msg: st.Err().Error()}
}

// guardRejection is the type of a Guard's rejections, which sluice keeps
// unexported: sluice.Rejection makes them.
var guardRejection = reflect.TypeOf(sluice.Rejection(sluice.Decision{}))

// isGuardRejection reports whether err is itself a Guard's rejection (made
// by sluice.Rejection), not an error that wraps one.
func isGuardRejection(err error) bool {
	return err != nil && reflect.TypeOf(err) == guardRejection
}

// Error converts a sluice rejection (an error matching sluice.ErrRejected and
// carrying a rejection of a Guard, as sluice.RejectionOf reads it) into an
// error that gRPC sends as the rejection status of its Decision, and that still
// matches sluice.ErrRejected and its cause with errors.Is; the errors that
// wrap the rejection are dropped, so that their text does not go on the
// wire. A Guard's timeout wrapping an inner Guard's rejection is a timeout,
// not a rejection (as sluice.DefaultClassifier has it), and is returned as
// it is, as is any other error, nil included. A handler that runs its own
// Guard returns rejectionError(err) to answer its rejections as the interceptors do.
func rejectionError(err error) error {
	r, d, rej := rejectionIn(err)
	switch {
	case r != nil:
		return r
	case rej != nil:
		return newRejection(rej, d)
	}
	return err
}

// rejectionIn returns the sluice rejection that err is or wraps: one of the
// interceptors' own (r, with its Guard's rejection rej and its Decision d),
// or a Guard's (rej and d alone). It returns none when a
// *timeouterr.Error wraps the rejection: a Guard's timeout wrapping an
// inner Guard's rejection is a timeout.
func rejectionIn(err error) (r *rejection, d sluice.Decision, rej error) {
	for err != nil {
		switch e := err.(type) {
		case *rejection:
			return e, e.d, e.rej
		case *timeouterr.Error:
			return nil, sluice.Decision{}, nil
		}
		if isGuardRejection(err) {
			// A Guard's rejection tells its delay counted from now, from an
			// instant it keeps to the millisecond: the delay is announced
			// to the millisecond too, not with the noise of the reading.
			d, _ := sluice.RejectionOf(err)
			d.RetryAfter = ceilMilli(d.RetryAfter)
			return nil, d, err
		}
		switch e := err.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				if r, d, rej := rejectionIn(x); rej != nil {
					return r, d, rej
				}
			}
			return nil, sluice.Decision{}, nil
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		default:
			return nil, sluice.Decision{}, nil
		}
	}
	return nil, sluice.Decision{}, nil
}

// ceilMilli rounds d up to a whole millisecond.
func ceilMilli(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r > 0 {
		return d - r + time.Millisecond
	}
	return d
}

// RejectionOf reads back a rejection out of err, a gRPC status error: the
// Decision it carried, and true. From a sluice server, over the wire, the
// Decision is what the status holds: not allowed, its policy, its
// RetryAfter, its cause as one of sluice's errors, and Limit -1. From this
// client's own interceptor, which rejected the call before sending it, it
// is the policy's whole Decision, its quota included. It
// reports false when err carries no sluice ErrorInfo. RetryAfter is the
// delay the status announced, one second when the policy could not know it,
// and never negative: 0 when the status announced none, or a delay that is
// not positive. A client can use it to
// tell a peer's rate limit or overload from other failures.
func RejectionOf(err error) (sluice.Decision, bool) {
	if err == nil {
		return sluice.Decision{}, false
	}
	var r *rejection
	if errors.As(err, &r) {
		d := r.d
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
			if v.GetDomain() != errorDomain {
				continue
			}
			found = true
			d.Policy = v.GetMetadata()[metadataPolicy]
			cause := causeOfReason(v.GetReason())
			if cause == nil {
				cause = sluice.ErrRejected
			}
			d.Cause = cause
		case *errdetails.RetryInfo:
			// A delay that is not positive announces none.
			if v.GetRetryDelay() != nil && v.GetRetryDelay().AsDuration() > 0 {
				d.RetryAfter = v.GetRetryDelay().AsDuration()
			}
		}
	}
	if !found {
		return sluice.Decision{}, false
	}
	return d, true
}
