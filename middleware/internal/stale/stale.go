// Package stale is the cache of good GET responses that the HTTP adapters
// serve, as a Guard's fallback, in place of a rejection. Package middleware
// exports it as StaleCache.
package stale

import (
	"container/list"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
)

// Cache keeps the last good (200, GET, cacheable) response of each route,
// key and request URI (of each route and URI when shared), bounded in
// entries and in body size, dropping the least recently stored first. It is
// a sluice.FallbackOf[http.Handler]: in a Guard's fallbacks it answers a
// rejected GET or HEAD request with the copy kept for it, and the HTTP
// adapters feed it with the good GET responses of the routes that Guard
// protects. It is safe for concurrent use.
type Cache struct {
	maxEntries int
	maxAge     time.Duration
	maxBody    int
	shared     bool
	causes     []sluice.Cause // nil: every rejection and failure
	only       bool           // Only was given

	mu      sync.Mutex
	entries map[string]*list.Element
	order   list.List // front: most recently stored
}

type entry struct {
	key    string
	status int
	header http.Header
	body   []byte
	stored time.Duration
	// initial is the Age the response came with; fresh, how long after it
	// was stored the copy may be served, -1 for as long as the cache's
	// maxAge (see freshness).
	initial, fresh time.Duration
}

// Option configures a Cache.
type Option func(*Cache)

// Shared makes the cache keep one copy per route and URI for every client.
func Shared() Option { return func(c *Cache) { c.shared = true } }

// Only makes the cache answer only the errors of causes: rejections, and
// timeouts (sluice.CauseTimeout).
func Only(causes ...sluice.Cause) Option {
	return func(c *Cache) { c.only, c.causes = true, append(c.causes, causes...) }
}

// New returns a Cache of at most maxEntries responses, each served for at
// most maxAge after it was stored and kept only when its body is at most
// maxBody bytes.
func New(maxEntries int, maxAge time.Duration, maxBody int, opts ...Option) (*Cache, error) {
	c := &Cache{maxEntries: maxEntries, maxAge: maxAge, maxBody: maxBody, entries: make(map[string]*list.Element)}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("middleware: NewStaleCache: option %d is nil", i)
		}
		o(c)
	}
	if c.only && len(c.causes) == 0 {
		// Not "every cause": a list that came out empty answers nothing
		// the user meant it to.
		return nil, errors.New("middleware: StaleOnly: no cause given")
	}
	for _, cause := range c.causes {
		if cause == sluice.CauseNone {
			return nil, errors.New("middleware: StaleOnly: CauseNone is no cause")
		}
	}
	switch {
	case maxEntries < 1:
		return nil, fmt.Errorf("middleware: NewStaleCache: maxEntries %d < 1", maxEntries)
	case maxAge <= 0:
		return nil, fmt.Errorf("middleware: NewStaleCache: maxAge %v <= 0", maxAge)
	case maxBody < 1:
		return nil, fmt.Errorf("middleware: NewStaleCache: maxBody %d < 1", maxBody)
	}
	return c, nil
}

// MaxBody returns the largest body the cache keeps.
func (c *Cache) MaxBody() int { return c.maxBody }

// Len returns the number of responses kept, those too old to serve among
// them until they are replaced or evicted.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// Request names the response to a request, for the cache: its route, its
// key and the request (its host and URI); Now is the instant, on the
// clock of the route's Guard, at which the cache answers or keeps. Addr is
// the connection's address as the request came (a middleware inside may
// rewrite R's since); "" for R's. Credentialed tells that the request, as
// it came, carried credentials (see Asked): R's header may have lost them
// since.
type Request struct {
	Route, Key, Addr string
	R                *http.Request
	Now              time.Duration
	Credentialed     bool
}

type requestKey struct{}

// WithRequest returns ctx carrying q, for the Cache's answers.
func WithRequest(ctx context.Context, q *Request) context.Context {
	return context.WithValue(ctx, requestKey{}, q)
}

func (c *Cache) entryKey(q *Request) string {
	key := q.Key
	switch {
	case c.shared:
		key = ""
	case key == "":
		// No request key: the connection's address stands for the client,
		// so that no copy of one client's answer serves another.
		addr := q.Addr
		if addr == "" {
			addr = q.R.RemoteAddr
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		key = "\x01" + host
	}
	k := q.Route + "\x00" + key + "\x00" + q.R.Host + q.R.URL.RequestURI()
	if len(k) > maxRawKey {
		// A long URI or key (a client's choice: net/http reads request
		// lines up to a megabyte) is kept as its digest, so the cache's
		// memory is bounded by its entries whatever the requests. Raw keys
		// start with the route, never with 0xff.
		sum := sha256.Sum256([]byte(k))
		k = "\xff" + string(sum[:])
	}
	return k
}

// maxRawKey is the longest entry key kept as it is, and maxHeader the most
// bytes of header fields a copy keeps: a response with more is not kept.
const (
	maxRawKey = 256
	maxHeader = 16 << 10
)

// dropped are the fields a stale copy does not repeat: hop-by-hop fields,
// the guard's own fields, and cookies, which belong to the request that
// set them.
var dropped = []string{
	"Connection", "Keep-Alive", "Transfer-Encoding", "Te", "Trailer", "Upgrade",
	"Proxy-Authenticate", "Set-Cookie", "Date", "Age",
	"Ratelimit", "Ratelimit-Policy", "Retry-After",
	"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset",
}

// Asked tells, of a request as it came (before a handler or a middleware
// inside changed its header: an authentication step that drops the
// Authorization field it checked), whether its answer may be kept at all
// (its Cache-Control says no no-store: a cache must keep no part of the
// answer) and whether it carries credentials (Authorization, Cookie), which
// keep the answer only when it says public.
func Asked(r *http.Request) (keep, credentialed bool) {
	for k, v := range r.Header {
		// By length first: most fields are none of the three. In any case:
		// a field set by a middleware under a name of its own spelling is
		// the same field.
		if len(v) == 0 || len(k) != len("Authorization") && len(k) != len("Cookie") {
			continue // "Cache-Control" is as long as "Authorization"
		}
		switch {
		case strings.EqualFold(k, "Authorization") || strings.EqualFold(k, "Cookie"):
			credentialed = true
		case strings.EqualFold(k, "Cache-Control"):
			for _, d := range v {
				if strings.Contains(strings.ToLower(d), "no-store") {
					return false, credentialed
				}
			}
		}
	}
	return true, credentialed
}

// Cacheable reports whether the response with header h (its names
// canonical) to a request that carried credentials or not (see Asked) may
// be served to other requests of the same route, key and URI (route and
// URI alone when shared). Like a shared cache, it keeps nothing marked
// no-store, no-cache or private, nothing that sets a cookie, nothing that
// varies with request fields (which the key does not hold), nothing with
// trailers (fields that come after the body, unseen here), and nothing
// answered to a request carrying credentials unless the response says
// public.
func Cacheable(credentialed bool, h http.Header) bool {
	if len(h.Values("Trailer")) > 0 {
		return false
	}
	public := false
	for _, v := range h.Values("Cache-Control") {
		v = strings.ToLower(v)
		if strings.Contains(v, "no-store") || strings.Contains(v, "no-cache") || strings.Contains(v, "private") {
			return false
		}
		public = public || strings.Contains(v, "public")
	}
	if len(h.Values("Set-Cookie")) > 0 || len(h.Values("Vary")) > 0 {
		return false
	}
	return public || !credentialed
}

// canonical returns a copy of h with its names canonical, the values of
// names spelt in several cases together, or false when h names a trailer
// (http.TrailerPrefix): a response whose fields come after its body.
func canonical(h http.Header) (http.Header, bool) {
	c := make(http.Header, len(h))
	for k, v := range h {
		if len(k) >= len(http.TrailerPrefix) && strings.EqualFold(k[:len(http.TrailerPrefix)], http.TrailerPrefix) {
			return nil, false
		}
		ck := http.CanonicalHeaderKey(k)
		c[ck] = append(c[ck], v...)
	}
	return c, true
}

// headerSize returns the bytes of h's names and values.
func headerSize(h http.Header) int {
	n := 0
	for k, vs := range h {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	return n
}

// Store keeps a copy of the good GET response to q, header and body, when
// it may be served to others (Cacheable), its body is small enough, and
// whole: as long as a Content-Length declares.
func (c *Cache) Store(q *Request, header http.Header, body []byte) {
	if len(body) > c.maxBody {
		return
	}
	// Fields set under names of the handler's own spelling (a map
	// assignment keeps it) are the same fields: judged, and dropped, as
	// such.
	h, ok := canonical(header)
	// The request as it came (q.Credentialed, told by an adapter that read
	// it then) and as it is.
	keep, cred := Asked(q.R)
	if !ok || !keep || !Cacheable(cred || q.Credentialed, h) || headerSize(h) > maxHeader {
		return
	}
	for _, cl := range h.Values("Content-Length") {
		// Each value (several must agree, as a client reads them) is the
		// body's length in digits: else a body cut short, one past what was
		// declared, or an answer a client refuses.
		cl = strings.TrimSpace(cl)
		if cl == "" || strings.Trim(cl, "0123456789") != "" {
			return
		}
		if n, err := strconv.ParseInt(cl, 10, 64); err != nil || n != int64(len(body)) {
			return
		}
	}
	initial, fresh, ok := freshness(h)
	if !ok {
		return
	}
	key := c.entryKey(q)
	for _, f := range dropped {
		delete(h, f)
	}
	e := &entry{key: key, status: http.StatusOK, header: h, body: append([]byte(nil), body...), stored: q.Now, initial: initial, fresh: fresh}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		el.Value = e
		c.order.MoveToFront(el)
		return
	}
	c.entries[key] = c.order.PushFront(e)
	for c.order.Len() > c.maxEntries {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.entries, last.Value.(*entry).key)
	}
}

// load returns the copy kept for the request in ctx and its age; false
// when there is none young enough, or when the request may change state
// (neither GET nor HEAD).
func (c *Cache) load(ctx context.Context, err error) (*entry, time.Duration, bool) {
	if c.causes != nil && !slices.Contains(c.causes, sluice.CauseOf(err)) {
		return nil, 0, false
	}
	q, ok := ctx.Value(requestKey{}).(*Request)
	if !ok || (q.R.Method != http.MethodGet && q.R.Method != http.MethodHead) {
		return nil, 0, false
	}
	key := c.entryKey(q)
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return nil, 0, false
	}
	e := el.Value.(*entry)
	age := max(q.Now-e.stored, 0)
	if age > c.maxAge || e.fresh >= 0 && age > e.fresh {
		// Too old at q.Now, but kept until replaced or evicted: a request
		// that a fallback was found to answer at an earlier instant (a 5xx
		// held back for this copy) still finds it.
		return nil, 0, false
	}
	return e, e.initial + age, true
}

// maxDelta is the largest delta-seconds a cache need represent (RFC 9111,
// section 1.2.2): larger values, and overflows, count as this.
const maxDelta = 1 << 31 * time.Second

// freshness reads h, a response's canonical fields: the Age it came with
// (its first value, ignored when not a number), and how long its copy may
// be served once stored. A stale copy is what the cache serves, so a
// response whose origin forbids serving it stale (must-revalidate,
// proxy-revalidate, or s-maxage, which implies proxy-revalidate for a
// shared cache; RFC 9111, section 4.2.4) is served only while fresh: for
// its s-maxage, else its max-age, less its Age. Without either, or with one
// that is not a number, it is never fresh (ok false). Any other response
// has fresh -1: it serves for as long as the cache's maxAge.
func freshness(h http.Header) (initial, fresh time.Duration, ok bool) {
	if v := h.Values("Age"); len(v) > 0 {
		first, _, _ := strings.Cut(v[0], ",")
		if d, ok := deltaSeconds(strings.TrimSpace(first)); ok {
			initial = d
		}
	}
	must := false
	maxAge, sMaxAge := time.Duration(-1), time.Duration(-1)
	for _, v := range h.Values("Cache-Control") {
		for _, dir := range strings.Split(v, ",") {
			name, arg, _ := strings.Cut(strings.TrimSpace(dir), "=")
			arg = strings.Trim(strings.TrimSpace(arg), `"`)
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "must-revalidate", "proxy-revalidate":
				must = true
			case "s-maxage":
				must = true
				if d, ok := deltaSeconds(arg); ok {
					sMaxAge = d
				}
			case "max-age":
				if d, ok := deltaSeconds(arg); ok {
					maxAge = d
				}
			}
		}
	}
	if !must {
		return initial, -1, true
	}
	lifetime := maxAge
	if sMaxAge >= 0 {
		lifetime = sMaxAge
	}
	if lifetime < 0 || initial > lifetime {
		return 0, 0, false
	}
	return initial, lifetime - initial, true
}

// deltaSeconds parses s, a number of seconds in digits, capped at maxDelta.
func deltaSeconds(s string) (time.Duration, bool) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > int64(maxDelta/time.Second) {
		return maxDelta, true // only digits: too large
	}
	return time.Duration(n) * time.Second, true
}

// name is the name of the Cache's answers in a Guard's fallback events.
const name = "stale"

// Declared implements sluice.Fallback: it reports whether the cache keeps a
// copy young enough for the request in ctx.
func (c *Cache) Declared(ctx context.Context, err error) (string, bool) {
	if err == nil {
		return "", false
	}
	if _, _, ok := c.load(ctx, err); !ok {
		return "", false
	}
	return name, true
}

// AnswerValue implements sluice.FallbackOf[http.Handler]: the handler
// answers with the copy kept for the request in ctx and an Age field (a
// HEAD request gets the header fields alone). It passes (an empty name)
// when there is none.
func (c *Cache) AnswerValue(ctx context.Context, err error) (http.Handler, string, error) {
	if err == nil {
		return nil, "", nil
	}
	e, age, ok := c.load(ctx, err)
	if !ok {
		return nil, "", err
	}
	return &answer{e: e, age: age}, name, nil
}

// Answer implements sluice.Fallback, for Guard.Do: it is AnswerValue
// without the value.
func (c *Cache) Answer(ctx context.Context, err error) (string, error) {
	_, n, out := c.AnswerValue(ctx, err)
	return n, out
}

// answer serves a kept copy.
type answer struct {
	e   *entry
	age time.Duration
}

func (a *answer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	for k, v := range a.e.header {
		// A field the response has already (an outer middleware's request
		// ID, say) is this request's: the copy's was another's.
		if _, ok := h[k]; !ok {
			h[k] = v
		}
	}
	h.Set("Age", strconv.FormatInt(int64(a.age/time.Second), 10))
	h.Set("Content-Length", strconv.Itoa(len(a.e.body)))
	w.WriteHeader(a.e.status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(a.e.body)
	}
}
