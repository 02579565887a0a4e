package sluicehttp

import (
	"container/list"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice/middleware"
)

// Fallback answers a request that the guard rejected, in place of the
// rejection: a static response, a handler, or the stale copy of the last
// good response. Build one with StaticFallback, HandlerFallback or
// StaleFallback. The zero Fallback answers nothing, so the rejection is
// rendered as usual.
type Fallback struct {
	static  *staticResponse
	handler http.Handler
	stale   *StaleCache
}

type staticResponse struct {
	status int
	header http.Header
	body   []byte
}

// StaticFallback answers with status, a copy of header and body. status
// must be a valid final status (200–599).
func StaticFallback(status int, header http.Header, body []byte) (Fallback, error) {
	if status < 200 || status > 599 {
		return Fallback{}, fmt.Errorf("sluicehttp: StaticFallback: status %d is not in [200, 599]", status)
	}
	h := header.Clone()
	if h == nil {
		h = http.Header{}
	}
	if h.Get("Content-Length") == "" {
		h.Set("Content-Length", strconv.Itoa(len(body)))
	}
	return Fallback{static: &staticResponse{status: status, header: h, body: append([]byte(nil), body...)}}, nil
}

// HandlerFallback answers with h. RejectionFrom(r) gives h the Decision that
// rejected the request.
func HandlerFallback(h http.Handler) (Fallback, error) {
	if h == nil {
		return Fallback{}, errors.New("sluicehttp: HandlerFallback: nil handler")
	}
	return Fallback{handler: h}, nil
}

// StaleFallback answers a GET or HEAD request with the last good GET
// response kept in c for the same route, key and request URI (route and URI
// alone when c is StaleShared), with an Age field (a HEAD request gets its
// header fields, without the body). Routes that this fallback may answer
// keep a copy of their good GET responses in c. A request of another
// method, which may change state, is never answered from a copy: it, and a
// request for which c holds no copy young enough, is rejected as usual.
func StaleFallback(c *StaleCache) (Fallback, error) {
	if c == nil {
		return Fallback{}, errors.New("sluicehttp: StaleFallback: nil cache")
	}
	return Fallback{stale: c}, nil
}

// StaleCache keeps the last good (200, GET, cacheable) response of each route,
// key and request URI (of each route and URI with StaleShared), bounded in
// entries and in body size, dropping the least recently stored first. It is
// safe for concurrent use.
type StaleCache struct {
	maxEntries int
	maxAge     time.Duration
	maxBody    int
	shared     bool // one copy per route and URI, whatever the key

	mu      sync.Mutex
	entries map[string]*list.Element
	order   list.List // front: most recently stored
}

type staleEntry struct {
	key    string
	status int
	header http.Header
	body   []byte
	stored time.Duration
}

// NewStaleCache returns a StaleCache of at most maxEntries responses, each
// served for at most maxAge after it was stored and kept only when its body
// is at most maxBody bytes. Options: StaleShared (default: a copy per
// request key).
func NewStaleCache(maxEntries int, maxAge time.Duration, maxBody int, opts ...StaleCacheOption) (*StaleCache, error) {
	c := &StaleCache{maxEntries: maxEntries, maxAge: maxAge, maxBody: maxBody, entries: make(map[string]*list.Element)}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	switch {
	case maxEntries < 1:
		return nil, fmt.Errorf("sluicehttp: NewStaleCache: maxEntries %d < 1", maxEntries)
	case maxAge <= 0:
		return nil, fmt.Errorf("sluicehttp: NewStaleCache: maxAge %v <= 0", maxAge)
	case maxBody < 1:
		return nil, fmt.Errorf("sluicehttp: NewStaleCache: maxBody %d < 1", maxBody)
	}
	return c, nil
}

// StaleCacheOption configures a StaleCache.
type StaleCacheOption func(*StaleCache)

// StaleShared makes the cache keep one copy per route and request URI for
// every client, as a shared HTTP cache does, rather than one per request key
// (the client address, the API key a Keyer finds): a client's first request
// during an outage is then answered from another's copy. It suits responses
// that do not depend on who asked. The rules for what is kept still hold:
// nothing private, no-store or no-cache, nothing that sets a cookie or
// varies with request fields, nothing answered to a request with
// credentials unless the response says public.
func StaleShared() StaleCacheOption { return func(c *StaleCache) { c.shared = true } }

// Len returns the number of responses kept.
func (c *StaleCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// staleID names the response to a request: its route, its key and its URI.
type staleID struct {
	route, key string
	r          *http.Request
}

// entryKey returns the name of the copy of id's response in c.
func (c *StaleCache) entryKey(id staleID) string {
	key := id.key
	if c.shared {
		key = ""
	}
	return id.route + "\x00" + key + "\x00" + id.r.Host + id.r.URL.RequestURI()
}

// dropped are the fields a stale copy does not repeat: hop-by-hop fields, the
// guard's own fields, and cookies, which belong to the request that set them.
var dropped = []string{
	"Connection", "Keep-Alive", "Transfer-Encoding", "Te", "Trailer", "Upgrade",
	"Proxy-Authenticate", "Set-Cookie", "Date", "Age",
	middleware.FieldRateLimit, middleware.FieldRateLimitPolicy, middleware.FieldRetryAfter,
	middleware.FieldXRateLimitLimit, middleware.FieldXRateLimitRemaining, middleware.FieldXRateLimitReset,
}

// cacheable reports whether the response to r, with header h, may be served
// to other requests of the same route, key and URI (route and URI alone
// with StaleShared). Like a shared cache, it
// keeps nothing marked no-store, no-cache or private, nothing that sets a
// cookie, nothing that varies with request fields (which the key does not
// hold), and nothing answered to a request carrying credentials unless the
// response says public.
func cacheable(r *http.Request, h http.Header) bool {
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
	if !public && (r.Header.Get("Authorization") != "" || r.Header.Get("Cookie") != "") {
		return false
	}
	return true
}

func (c *StaleCache) store(id staleID, status int, header http.Header, body []byte, now time.Duration) {
	if len(body) > c.maxBody || !cacheable(id.r, header) {
		return
	}
	key := c.entryKey(id)
	h := header.Clone()
	for _, f := range dropped {
		delete(h, f)
	}
	e := &staleEntry{key: key, status: status, header: h, body: append([]byte(nil), body...), stored: now}
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
		delete(c.entries, last.Value.(*staleEntry).key)
	}
}

func (c *StaleCache) load(key string, now time.Duration) (*staleEntry, time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return nil, 0, false
	}
	e := el.Value.(*staleEntry)
	age := now - e.stored
	if age < 0 {
		age = 0
	}
	if age > c.maxAge {
		c.order.Remove(el)
		delete(c.entries, key)
		return nil, 0, false
	}
	return e, age, true
}

// serve answers r with fb; it reports false when fb has nothing to answer
// with.
func (fb Fallback) serve(w http.ResponseWriter, r *http.Request, id staleID, now time.Duration) bool {
	switch {
	case fb.static != nil:
		h := w.Header()
		for k, v := range fb.static.header {
			h[k] = v
		}
		w.WriteHeader(fb.static.status)
		if r.Method != http.MethodHead {
			_, _ = w.Write(fb.static.body)
		}
		return true
	case fb.handler != nil:
		fb.handler.ServeHTTP(w, r)
		return true
	case fb.stale != nil:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return false
		}
		e, age, ok := fb.stale.load(fb.stale.entryKey(id), now)
		if !ok {
			return false
		}
		h := w.Header()
		for k, v := range e.header {
			h[k] = v
		}
		h.Set("Age", strconv.FormatInt(int64(age/time.Second), 10))
		h.Set("Content-Length", strconv.Itoa(len(e.body)))
		w.WriteHeader(e.status)
		if r.Method != http.MethodHead {
			_, _ = w.Write(e.body)
		}
		return true
	}
	return false
}
