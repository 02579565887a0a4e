package routing

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policywindow"
)

// Header field names, in the canonical form net/http stores them in.
const (
	// FieldRetryAfter is Retry-After, in whole seconds.
	FieldRetryAfter = "Retry-After"
	// FieldRateLimit is the IETF draft RateLimit field: "name";r=R;t=T.
	FieldRateLimit = "Ratelimit"
	// FieldRateLimitPolicy is the IETF draft RateLimit-Policy field:
	// "name";q=Q;w=W.
	FieldRateLimitPolicy = "Ratelimit-Policy"
	// FieldXRateLimitLimit is the older X-RateLimit-Limit field: the quota.
	FieldXRateLimitLimit = "X-Ratelimit-Limit"
	// FieldXRateLimitRemaining is the older X-RateLimit-Remaining field.
	FieldXRateLimitRemaining = "X-Ratelimit-Remaining"
	// FieldXRateLimitReset is the older X-RateLimit-Reset field, in seconds
	// from now until the quota is whole again (not a Unix time).
	FieldXRateLimitReset = "X-Ratelimit-Reset"
	// ProblemContentType is the media type of rejection bodies (RFC 9457).
	ProblemContentType = "application/problem+json"
	// DefaultProblemTypeBase prefixes the cause to form a problem's type:
	// "urn:sluice:problem:rate-limited".
	DefaultProblemTypeBase = "urn:sluice:problem:"
)

// HTTPStatus returns the HTTP status that answers a rejection for cause c:
// 429 Too Many Requests for a rate limit; 503 Service Unavailable for an
// open circuit, an overloaded service, a full concurrency limit, and any
// other cause.
func HTTPStatus(c sluice.Cause) int {
	if c == sluice.CauseRateLimited {
		return http.StatusTooManyRequests
	}
	return http.StatusServiceUnavailable
}

// RetryAfterSeconds returns d in whole seconds, rounded up: 1.2 s is 2. It
// is 0 for d ≤ 0.
func RetryAfterSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// maxSFInteger is the largest integer a structured field may carry (RFC 8941:
// at most 15 digits).
const maxSFInteger = 999_999_999_999_999

func sfInt(v int64) int64 {
	if v < 0 {
		return 0
	}
	if v > maxSFInteger {
		return maxSFInteger
	}
	return v
}

// appendSFString appends s as a structured-field string: quoted, with '"'
// and '\' escaped and characters outside printable ASCII replaced by '?'.
func appendSFString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20 || c > 0x7e:
			dst = append(dst, '?')
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// AppendRateLimitPolicy appends the value of a RateLimit-Policy field for a
// policy named name with quota limit over window: "name";q=100;w=60. The w
// parameter is left out when window is 0 (unknown). It is whole seconds: a
// window of another length (a token bucket's 10 over 100 ms) is told as
// the whole seconds that hold it, with the quota those take at the same
// rate (q=100;w=1), so that a client pacing itself by q/w keeps to the
// rate it is given.
func AppendRateLimitPolicy(dst []byte, name string, limit int64, window time.Duration) []byte {
	var secs int64
	if window > 0 {
		limit, secs = wholeSeconds(limit, window)
	}
	dst = appendSFString(dst, name)
	dst = append(dst, ";q="...)
	dst = strconv.AppendInt(dst, sfInt(limit), 10)
	if window > 0 {
		dst = append(dst, ";w="...)
		dst = strconv.AppendInt(dst, sfInt(secs), 10)
	}
	return dst
}

// wholeSeconds returns a quota of limit over window as one over whole
// seconds: window rounded up to them (a window a few nanoseconds past a
// second, as a rate's interval rounded to nanoseconds makes, rounded
// down), and limit scaled to keep the rate, rounded down but for the
// float's error.
func wholeSeconds(limit int64, window time.Duration) (int64, int64) {
	secs := int64(window / time.Second)
	if window%time.Second > time.Microsecond || secs == 0 {
		secs++
	}
	whole := time.Duration(secs) * time.Second
	if whole == window || limit <= 0 {
		return limit, secs
	}
	q := float64(limit) * (float64(whole) / float64(window))
	if r := math.Round(q); math.Abs(q-r) <= 1e-6*r {
		q = r
	}
	if q >= maxSFInteger {
		return maxSFInteger, secs
	}
	return int64(q), secs
}

// AppendRateLimit appends the value of a RateLimit field for a policy named
// name with remaining quota units left, whole again in reset:
// "name";r=0;t=7. t is rounded up to whole seconds.
func AppendRateLimit(dst []byte, name string, remaining int64, reset time.Duration) []byte {
	dst = appendSFString(dst, name)
	dst = append(dst, ";r="...)
	dst = strconv.AppendInt(dst, sfInt(remaining), 10)
	dst = append(dst, ";t="...)
	return strconv.AppendInt(dst, sfInt(RetryAfterSeconds(reset)), 10)
}

// Renderer turns a Guard's Decision into header fields and a problem body,
// the same for every adapter. Its zero value sends the RateLimit fields on
// admitted and rejected requests, no older X-RateLimit fields, and problem
// types under DefaultProblemTypeBase.
type Renderer struct {
	// Legacy adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset next to the draft fields.
	Legacy bool
	// QuietAdmitted leaves the rate-limit fields off admitted responses; only
	// rejections carry them.
	QuietAdmitted bool
	// ProblemTypeBase prefixes the cause ("rate-limited") to form the type
	// of problem bodies; "" means DefaultProblemTypeBase.
	ProblemTypeBase string
}

// fieldSlab is where the header values that change with every Decision are
// made: the values' one-element slices and the bytes their strings point
// into are carved from it, front to back, and never written again once
// carved, so that a value stays valid for as long as a header map holds it.
// A slab serves a few dozen responses and is then left to the collector, so
// the cost of an allocation is shared among them. (The values that depend
// only on the policy are made once per Route.)
type fieldSlab struct {
	strs       [slabStrings]string
	vals       [slabStrings / shareEvery]rateLimitValue
	buf        [1536]byte
	ns, nv, nb int
	made       int // RateLimit values made in the slab
}

// shareEvery is how often a RateLimit value made in a slab is kept for the
// responses that follow: the first of a slab, then one in shareEvery. A
// value that repeats is kept after a few responses; values that change with
// every response (a limit near its quota) then rarely write the shared
// pointer, which would otherwise bounce between cores.
const shareEvery = 8

// slabStrings is how many header values a slab holds.
const slabStrings = 32

// rateLimitValue is a RateLimit value with the r and t it was made for,
// carved from a slab and immutable once carved; v points at the value's
// string in the slab.
type rateLimitValue struct {
	r, t int64
	v    *string
}

// slabs holds the slabs that have room left; each is used by one goroutine
// at a time, between Get and Put.
var slabs = sync.Pool{New: func() any { return new(fieldSlab) }}

// maxFieldBytes bounds the bytes one Decision's values take when the
// policy's name is of a sensible length; longer ones spill to the heap.
const maxFieldBytes = 160

// Admitted sets on h the fields that describe an admitted request's
// Decision: RateLimit-Policy and RateLimit (and the older fields when
// Legacy), when d has a quota (Limit ≥ 0) and QuietAdmitted is not set. rt
// supplies the policy's window and keeps the values that depend only on the
// policy, so that they are made once; it may be nil, and then they are made
// afresh. A recent RateLimit value is kept per policy too, and a response
// whose r and t match it sets that one, as happens under a limit well above
// the traffic. The values that change are carved from a
// pooled slab that a few dozen responses share, so a response allocates
// nothing of its own.
//
// The values set are shared between responses: replace them (Header.Set,
// Header.Del), never write into their slices.
func (r *Renderer) Admitted(h map[string][]string, rt *Route, d sluice.Decision) {
	if r.QuietAdmitted || d.Limit < 0 || d.Policy == "" {
		return
	}
	// The common case first: the policy of the route's last admitted answer,
	// with the RateLimit value it keeps. A response then costs two map
	// inserts and a few compares.
	if rt != nil && !r.Legacy {
		if pf := rt.quoted.Load(); pf != nil && pf.name == d.Policy && pf.limit == d.Limit && pf.epoch.Load() == policywindow.Epoch() {
			if c := pf.kept(sfInt(d.Remaining), sfInt(RetryAfterSeconds(d.Reset))); c != nil {
				h[FieldRateLimitPolicy] = pf.policy
				h[FieldRateLimit] = unsafe.Slice(c.v, 1)
				return
			}
		}
	}
	r.setFields(h, rt, &d, d.Reset, false, true)
}

// Rejected sets on h the fields of a rejection: Retry-After (whole seconds,
// rounded up, at least 1), the rate-limit fields when d has a quota (with t
// equal to Retry-After), Content-Type application/problem+json and
// Cache-Control no-store. It returns the status to answer with. own tells
// a rejection by rt's Guard from one by another Guard, which a handler met:
// its RateLimit-Policy names no window (see Route.fields).
func (r *Renderer) Rejected(h map[string][]string, rt *Route, d sluice.Decision, own bool) int {
	retry := d.RetryAfter
	if retry <= 0 {
		retry = time.Second
	}
	r.setFields(h, rt, &d, retry, true, own)
	h["Content-Type"] = problemContentType
	h["Cache-Control"] = noStore
	return HTTPStatus(sluice.CauseOf(d.Cause))
}

var (
	// problemContentType is shared by every rejection Rejected renders,
	// and by nothing else: IsRejection tells one by it.
	problemContentType = []string{ProblemContentType}
	noStore            = []string{"no-store"}
)

// bodyFields are the header fields that describe a response's body, its
// representation, its validators and its freshness: a placeholder that
// replaces it must not be cached for as long as it would have been.
var bodyFields = []string{
	"Content-Type", "Content-Length", "Content-Encoding", "Content-Range",
	"Content-Language", "Content-Disposition", "Content-Location", "Etag",
	"Last-Modified", "X-Content-Type-Options", "Cache-Control", "Expires",
}

// DropBodyFields deletes from h the fields a handler set for a body that
// will not go out: its answer replaced by a fallback's or a rejection's, or
// its failure's status sent alone.
func DropBodyFields(h map[string][]string) {
	for _, f := range bodyFields {
		delete(h, f)
	}
}

// IsRejection reports whether h holds the fields Rejected set: an answer
// that a sluice middleware gave in place of the handler's, which an outer
// one counts for nothing. A handler's own problem answer, whose
// Content-Type is its own value, is none.
func IsRejection(h map[string][]string) bool {
	v := h["Content-Type"]
	return len(v) == 1 && &v[0] == &problemContentType[0]
}

func (r *Renderer) setFields(h map[string][]string, rt *Route, d *sluice.Decision, reset time.Duration, rejected, own bool) {
	quota := d.Limit >= 0 && d.Policy != ""
	var pf *policyFields
	var rv, tv int64
	made := false // the RateLimit value is set
	if quota {
		pf = rt.fields(d, own)
		if !rejected && rt != nil && rt.quoted.Load() != pf {
			rt.quoted.Store(pf)
		}
		h[FieldRateLimitPolicy] = pf.policy
		if r.Legacy {
			h[FieldXRateLimitLimit] = pf.limitV
		}
		rv, tv = sfInt(d.Remaining), sfInt(RetryAfterSeconds(reset))
		if c := pf.kept(rv, tv); c != nil {
			h[FieldRateLimit] = unsafe.Slice(c.v, 1)
			made = true
			if !rejected && !r.Legacy {
				return
			}
		}
	} else if !rejected {
		return
	}
	sl := slabs.Get().(*fieldSlab)
	if sl.ns+4 > len(sl.strs) || sl.nb+maxFieldBytes > len(sl.buf) {
		sl = new(fieldSlab)
	}
	b := sl.buf[sl.nb:sl.nb]
	var ends [4]int
	var names [4]string
	n, rl := 0, -1
	if rejected {
		b = strconv.AppendInt(b, RetryAfterSeconds(reset), 10)
		names[n], ends[n] = FieldRetryAfter, len(b)
		n++
	}
	if quota {
		if !made {
			b = append(b, pf.prefix...)
			b = strconv.AppendInt(b, rv, 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, tv, 10)
			names[n], ends[n], rl = FieldRateLimit, len(b), n
			n++
		}
		if r.Legacy {
			b = strconv.AppendInt(b, rv, 10)
			names[n], ends[n] = FieldXRateLimitRemaining, len(b)
			n++
			b = strconv.AppendInt(b, RetryAfterSeconds(reset), 10)
			names[n], ends[n] = FieldXRateLimitReset, len(b)
			n++
		}
	}
	// The bytes of b are never written again (the slab moves past them), so
	// the strings may share them.
	all := unsafe.String(unsafe.SliceData(b), len(b))
	carved := len(b) > 0 && unsafe.SliceData(b) == &sl.buf[sl.nb]
	if carved {
		sl.nb += len(b)
	}
	start := 0
	for i := 0; i < n; i++ {
		sl.strs[sl.ns] = all[start:ends[i]]
		start = ends[i]
		v := sl.strs[sl.ns : sl.ns+1 : sl.ns+1]
		h[names[i]] = v
		sl.ns++
		if i == rl && carved {
			// Only a value in the slab is shared: one that spilled to the
			// heap (a long policy name) is made afresh each time.
			if sl.made%shareEvery == 0 && sl.nv < len(sl.vals) {
				c := &sl.vals[sl.nv]
				sl.nv++
				c.r, c.t, c.v = rv, tv, &v[0]
				pf.last.Store(c)
			}
			sl.made++
		}
	}
	slabs.Put(sl)
}

// Problem is the body of a rejection's problem answer and its
// Content-Length value. It is immutable once made and shared by the answers
// that agree on it: write Body, never into it, and replace Length in a
// header, never write into it.
type Problem struct {
	Body   []byte
	Length []string
	cause  sluice.Cause
	retry  int64
	base   string
}

// Problem returns the problem answer to the rejection d on route rt, which
// may be nil. A route keeps its last answer, so that a run of rejections
// that agree on the cause and the delay in whole seconds (an open breaker's
// for a second at a time, a spent limit's) share one, and allocate nothing.
func (r *Renderer) Problem(rt *Route, d sluice.Decision) *Problem {
	c, retry := sluice.CauseOf(d.Cause), max(RetryAfterSeconds(d.RetryAfter), 1)
	if rt != nil {
		if p := rt.problem.Load(); p != nil && p.cause == c && p.retry == retry && p.base == r.ProblemTypeBase {
			return p
		}
	}
	body := r.AppendProblem(make([]byte, 0, 256), d)
	p := &Problem{Body: body[:len(body):len(body)], Length: []string{strconv.Itoa(len(body))}, cause: c, retry: retry, base: r.ProblemTypeBase}
	if rt != nil {
		rt.problem.Store(p)
	}
	return p
}

// ProblemTitle returns the title of the problem body for cause c: "Too Many
// Requests", "Service Unavailable".
func ProblemTitle(c sluice.Cause) string {
	return http.StatusText(HTTPStatus(c))
}

func problemDetail(c sluice.Cause) string {
	switch c {
	case sluice.CauseRateLimited:
		return "The request rate limit is exceeded; retry after the delay in Retry-After."
	case sluice.CauseCircuitOpen:
		return "A dependency of this service is failing and calls to it are paused; retry after the delay in Retry-After."
	case sluice.CauseOverloaded:
		return "The service is overloaded and sheds load; retry after the delay in Retry-After."
	case sluice.CauseConcurrencyLimited:
		return "Too many requests are in progress; retry after the delay in Retry-After."
	}
	return "The service cannot take the request now; retry after the delay in Retry-After."
}

// AppendProblem appends the RFC 9457 problem body of a rejection: a JSON
// object with type (the base and the cause), title, status, detail and
// retryAfter (whole seconds). It never contains an error text.
func (r *Renderer) AppendProblem(dst []byte, d sluice.Decision) []byte {
	c := sluice.CauseOf(d.Cause)
	name := c.String()
	if c == sluice.CauseNone {
		name = "unavailable"
	}
	retry := RetryAfterSeconds(d.RetryAfter)
	if retry == 0 {
		retry = 1
	}
	return r.appendProblem(dst, name, HTTPStatus(c), problemDetail(c), retry)
}

// AppendMissingKeyProblem appends the problem body answering a request
// rejected with ErrMissingKey (400 Bad Request).
func (r *Renderer) AppendMissingKeyProblem(dst []byte) []byte {
	return r.appendProblem(dst, "missing-key", http.StatusBadRequest,
		"The request carries no identity the service's limits can be applied to.", 0)
}

func (r *Renderer) appendProblem(dst []byte, typ string, status int, detail string, retry int64) []byte {
	base := r.ProblemTypeBase
	if base == "" {
		base = DefaultProblemTypeBase
	}
	dst = append(dst, `{"type":`...)
	dst = appendJSONString(dst, base+typ)
	dst = append(dst, `,"title":`...)
	dst = appendJSONString(dst, http.StatusText(status))
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	dst = append(dst, `,"detail":`...)
	dst = appendJSONString(dst, detail)
	if retry > 0 {
		dst = append(dst, `,"retryAfter":`...)
		dst = strconv.AppendInt(dst, retry, 10)
	}
	return append(dst, '}', '\n')
}

// appendJSONString appends s as a JSON string.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
