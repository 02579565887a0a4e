package sluicegrpc

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/middleware/internal/routing"
	"github.com/sluice-go/sluice/middleware/internal/sfv"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// overTheWire returns err as a client receives it: its status marshalled
// and unmarshalled.
func overTheWire(t *testing.T, err error) error {
	t.Helper()
	st, _ := status.FromError(err)
	b, merr := proto.Marshal(st.Proto())
	if merr != nil {
		t.Fatal(merr)
	}
	var p spb.Status
	if uerr := proto.Unmarshal(b, &p); uerr != nil {
		t.Fatal(uerr)
	}
	return status.FromProto(&p).Err()
}

var fuzzCauses = []error{nil, sluice.ErrRateLimited, sluice.ErrCircuitOpen, sluice.ErrOverloaded,
	sluice.ErrConcurrencyLimited, sluice.ErrTimeout}

// FuzzRejectionStatusRoundTrip sends rejections of any policy name, delay
// and cause through RejectionStatus and the wire, and reads them back with
// RejectionOf: the policy (its invalid UTF-8 replaced), the delay the status
// announced (one second when the policy could not know it; the RetryInfo
// is encoded by hand) and the cause come back, and the quota metadata parse
// back to the decision's numbers.
func FuzzRejectionStatusRoundTrip(f *testing.F) {
	f.Add("ratelimit/per-ip", int64(1500*time.Millisecond), uint8(1), int64(100), int64(0))
	f.Add("", int64(0), uint8(0), int64(-1), int64(0))
	f.Add("\xff\xfe", int64(-1), uint8(5), int64(1<<62), int64(-3))
	f.Add("p", int64(1<<63-1), uint8(2), int64(7), int64(1<<62))
	f.Add("p", int64(time.Nanosecond), uint8(3), int64(0), int64(5))
	f.Fuzz(func(t *testing.T, policy string, retry int64, cause uint8, limit, remaining int64) {
		want := fuzzCauses[int(cause)%len(fuzzCauses)]
		var c error = sluice.ErrRejected
		if want != nil {
			c = want
		}
		d := sluice.Decision{Policy: policy, RetryAfter: time.Duration(retry), Cause: c, Limit: limit, Remaining: remaining}
		err := overTheWire(t, statusOf(d).Err())
		got, ok := RejectionOf(err)
		if !ok {
			t.Fatalf("RejectionOf(%v) not ok", err)
		}
		delay := time.Duration(retry)
		if delay <= 0 {
			delay = time.Second
		}
		if got.Allowed || got.Limit != -1 || got.RetryAfter != delay ||
			got.Policy != strings.ToValidUTF8(policy, "\uFFFD") ||
			sluice.CauseOf(got.Cause) != sluice.CauseOf(c) || !errors.Is(got.Cause, c) {
			t.Fatalf("%+v came back as %+v", d, got)
		}
		if status.Code(err) != codeOf(sluice.CauseOf(c)) {
			t.Fatalf("code %v for cause %v", status.Code(err), c)
		}

		if limit < 0 || policy == "" {
			return
		}
		md := quotaMetadata(nil, d, retryDelay(d))
		for _, k := range []string{MetadataRateLimitPolicy, MetadataRateLimit} {
			items, perr := sfv.ParseList(md[k][0])
			if perr != nil || len(items) != 1 {
				t.Fatalf("%s %q: %v", k, md[k], perr)
			}
			it := items[0]
			check := func(key string, want int64) {
				if v, ok := it.Int(key); !ok || v != want {
					t.Fatalf("%s %q: %s = %d, want %d", k, md[k][0], key, v, want)
				}
			}
			if k == MetadataRateLimitPolicy {
				check("q", min(limit, 999_999_999_999_999))
			} else {
				check("r", min(max(remaining, 0), 999_999_999_999_999))
				check("t", routing.RetryAfterSeconds(delay))
			}
		}
	})
}

// FuzzRejectionOf reads back statuses that any server could send: it
// reports a rejection only for a sluice ErrorInfo, never a negative delay,
// and the policy and cause the ErrorInfo names.
func FuzzRejectionOf(f *testing.F) {
	f.Add(uint32(8), "sluice", "RATE_LIMITED", "per-ip", int64(2), int32(500_000_000), true, true, false)
	f.Add(uint32(14), "sluice", "CIRCUIT_OPEN", "", int64(-30), int32(0), true, true, true)
	f.Add(uint32(14), "example.com", "RATE_LIMITED", "x", int64(1), int32(0), true, true, false)
	f.Add(uint32(8), "sluice", "SOMETHING_ELSE", "p", int64(0), int32(-1), true, false, false)
	f.Add(uint32(2), "sluice", "OVERLOADED", "p", int64(0), int32(0), false, true, true)
	f.Add(uint32(8), "sluice", "RATE_LIMITED", "p", int64(-1<<62), int32(-999_999_999), true, true, true)
	f.Fuzz(func(t *testing.T, code uint32, domain, reason, policy string, secs int64, nanos int32, hasInfo, hasRetry, retryFirst bool) {
		domain, reason, policy = strings.ToValidUTF8(domain, "?"), strings.ToValidUTF8(reason, "?"), strings.ToValidUTF8(policy, "?")
		p := &spb.Status{Code: int32(code % 17), Message: "m"}
		var details []*anypb.Any
		if hasInfo {
			a, err := anypb.New(&errdetails.ErrorInfo{Domain: domain, Reason: reason, Metadata: map[string]string{metadataPolicy: policy}})
			if err != nil {
				t.Fatal(err)
			}
			details = append(details, a)
		}
		if hasRetry {
			a, err := anypb.New(&errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: secs, Nanos: nanos}})
			if err != nil {
				t.Fatal(err)
			}
			details = append(details, a)
			if retryFirst {
				details[0], details[len(details)-1] = details[len(details)-1], details[0]
			}
		}
		p.Details = details
		if codes.Code(p.Code) == codes.OK {
			p.Code = int32(codes.Unavailable)
		}
		err := overTheWire(t, status.FromProto(p).Err())
		got, ok := RejectionOf(err)
		if ok != (hasInfo && domain == errorDomain) {
			t.Fatalf("RejectionOf(%v) ok = %v", err, ok)
		}
		if !ok {
			return
		}
		if got.Allowed || got.Policy != policy || got.Limit != -1 || got.RetryAfter < 0 {
			t.Fatalf("RejectionOf(%v) = %+v", err, got)
		}
		if hasRetry {
			if want := (&durationpb.Duration{Seconds: secs, Nanos: nanos}).AsDuration(); want > 0 && got.RetryAfter != want {
				t.Fatalf("RetryAfter %v, want %v", got.RetryAfter, want)
			}
		}
		if want := causeOfReason(reason); want != nil && got.Cause != want || want == nil && got.Cause != sluice.ErrRejected {
			t.Fatalf("reason %q read as cause %v", reason, got.Cause)
		}
	})
}

// statusOf is the status the interceptors answer the rejection d with.
func statusOf(d sluice.Decision) *status.Status {
	return rejectionStatus(d, codeOf(sluice.CauseOf(d.Cause)))
}
