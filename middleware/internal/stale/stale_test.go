package stale

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
)

// A kept copy may go to another request: nothing private is kept.
func TestCacheKeepsNoPersonalAnswer(t *testing.T) {
	tests := []struct {
		name    string
		reqHdr  http.Header
		respHdr http.Header
		kept    bool
	}{
		{"plain", nil, nil, true},
		{"private", nil, http.Header{"Cache-Control": {"max-age=60, private"}}, false},
		{"no-store", nil, http.Header{"Cache-Control": {"no-store"}}, false},
		{"no-cache", nil, http.Header{"Cache-Control": {"No-Cache"}}, false},
		{"sets a cookie", nil, http.Header{"Set-Cookie": {"s=1"}}, false},
		{"varies", nil, http.Header{"Vary": {"Accept-Language"}}, false},
		{"request with Authorization", http.Header{"Authorization": {"Bearer alice"}}, nil, false},
		{"request with a cookie", http.Header{"Cookie": {"session=alice"}}, nil, false},
		{"credentials but public", http.Header{"Authorization": {"Bearer alice"}}, http.Header{"Cache-Control": {"public, max-age=60"}}, true},
		{"private, in lower case", nil, http.Header{"cache-control": {"private"}}, false},
		{"a cookie, in lower case", nil, http.Header{"set-cookie": {"s=1"}}, false},
		{"request with authorization, in lower case", http.Header{"authorization": {"Bearer alice"}}, nil, false},
		{"trailers declared", nil, http.Header{"Trailer": {"Set-Cookie"}}, false},
		{"a trailer set", nil, http.Header{http.TrailerPrefix + "Set-Cookie": {"s=1"}}, false},
		{"a body short of its length", nil, http.Header{"Content-Length": {"100"}}, false},
		{"a body of its length", nil, http.Header{"Content-Length": {"15"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(8, time.Hour, 1024)
			require.NoError(t, err)
			r := httptest.NewRequest(http.MethodGet, "/me", nil)
			for k, v := range tt.reqHdr {
				r.Header[k] = v
			}
			h := http.Header{}
			for k, v := range tt.respHdr {
				h[k] = v
			}
			c.Store(&Request{Key: "k", R: r}, h, []byte("alice's account"))
			assert.Equal(t, tt.kept, c.Len() == 1)
		})
	}
}

func TestCacheIsBoundedAndAnswersFromTheRequestInItsContext(t *testing.T) {
	c, err := New(2, time.Minute, 8)
	require.NoError(t, err)
	req := func(path string, now time.Duration) *Request {
		return &Request{Route: "GET /x", Key: "k", R: httptest.NewRequest(http.MethodGet, path, nil), Now: now}
	}
	hdr := http.Header{"Ratelimit": {"x"}, "Content-Type": {"text/plain"}}
	c.Store(req("/1", 0), hdr, []byte("one"))
	c.Store(req("/2", 0), hdr, []byte("two"))
	c.Store(req("/3", 0), hdr, []byte("three"))
	c.Store(req("/big", 0), hdr, []byte("too big a body"))
	assert.Equal(t, 2, c.Len(), "the oldest is dropped, the big one never kept")

	errRej := errors.New("rejected")
	_, ok := c.Declared(context.Background(), errRej)
	assert.False(t, ok, "no request in the context")
	_, name, out := c.AnswerValue(WithRequest(context.Background(), req("/1", 0)), errRej)
	assert.Empty(t, name)
	assert.Same(t, errRej, out)

	ctx := WithRequest(context.Background(), req("/3", 5*time.Second))
	name, ok = c.Declared(ctx, errRej)
	assert.True(t, ok)
	assert.Equal(t, "stale", name)
	h, name, out := c.AnswerValue(ctx, errRej)
	require.NoError(t, out)
	assert.Equal(t, "stale", name)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/3", nil))
	assert.Equal(t, "three", rec.Body.String())
	assert.Equal(t, "5", rec.Header().Get("Age"))
	assert.Empty(t, rec.Header().Get("Ratelimit"), "the guard's fields are not repeated")

	post := &Request{Route: "GET /x", Key: "k", R: httptest.NewRequest(http.MethodPost, "/3", nil)}
	_, ok = c.Declared(WithRequest(context.Background(), post), errRej)
	assert.False(t, ok, "a POST may change state: no copy answers it")
	_, ok = c.Declared(WithRequest(context.Background(), req("/3", 2*time.Minute)), errRej)
	assert.False(t, ok, "too old")
}

func TestOnlyAnswersItsCauses(t *testing.T) {
	c, err := New(2, time.Minute, 8, Only(sluice.CauseCircuitOpen))
	require.NoError(t, err)
	q := &Request{R: httptest.NewRequest(http.MethodGet, "/", nil)}
	c.Store(q, http.Header{}, []byte("x"))
	ctx := WithRequest(context.Background(), q)
	_, ok := c.Declared(ctx, sluice.Rejection(sluice.Decision{Cause: sluice.ErrCircuitOpen}))
	assert.True(t, ok)
	_, ok = c.Declared(ctx, sluice.Rejection(sluice.Decision{Cause: sluice.ErrRateLimited}))
	assert.False(t, ok)
	_, err = New(2, time.Minute, 8, Only(sluice.CauseNone))
	assert.Error(t, err)
}

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		entries, body int
		age           time.Duration
	}{{0, 1, time.Second}, {1, 0, time.Second}, {1, 1, 0}} {
		_, err := New(tc.entries, tc.age, tc.body)
		assert.Error(t, err)
	}
	_, err := New(1, time.Second, 1, nil)
	assert.ErrorContains(t, err, "nil")
}

// Content-Length: several values must agree, and each be digits.
func TestStoreReadsContentLengthAsAClientDoes(t *testing.T) {
	for cl, kept := range map[string]bool{"5": true, "05": true, "+5": false, "5,5": true, "5,6": false, "x": false} {
		c, err := New(8, time.Hour, 1024)
		require.NoError(t, err)
		h := http.Header{"Content-Length": strings.Split(cl, ",")}
		c.Store(&Request{Key: "k", R: httptest.NewRequest(http.MethodGet, "/", nil)}, h, []byte("hello"))
		assert.Equal(t, kept, c.Len() == 1, cl)
	}
}

// An origin that says a response must not be served stale
// (must-revalidate, proxy-revalidate, or s-maxage, which implies
// proxy-revalidate for a shared cache) has its copy served only while it
// is fresh: for its s-maxage, else its max-age, less the Age it came with;
// never, without either. Other copies serve for the cache's maxAge.
func TestCopyMarkedMustRevalidateServesOnlyWhileFresh(t *testing.T) {
	const s = time.Second
	errRej := errors.New("rejected")
	for _, tc := range []struct {
		cacheControl, age string
		servedUpTo        time.Duration // -1: never served
	}{
		{"max-age=60", "", 10 * time.Minute},
		{"max-age=60, must-revalidate", "", 60 * s},
		{"Max-Age=\"60\", Must-Revalidate", "", 60 * s},
		{"public, max-age=60, proxy-revalidate", "", 60 * s},
		{"max-age=60, s-maxage=5", "", 5 * s},
		{"must-revalidate", "", -1},
		{"max-age=60, must-revalidate", "50", 10 * s},
		{"max-age=60, must-revalidate", "90", -1},
		{"max-age=x, must-revalidate", "", -1},
		{"must-revalidate, max-age=99999999999999999999", "", 10 * time.Minute},
	} {
		c, err := New(8, 10*time.Minute, 1024)
		require.NoError(t, err)
		h := http.Header{"Cache-Control": {tc.cacheControl}}
		if tc.age != "" {
			h.Set("Age", tc.age)
		}
		at := func(now time.Duration) *Request {
			return &Request{Key: "k", R: httptest.NewRequest(http.MethodGet, "/", nil), Now: now}
		}
		c.Store(at(0), h, []byte("hello"))
		served := func(now time.Duration) bool {
			_, ok := c.Declared(WithRequest(context.Background(), at(now)), errRej)
			return ok
		}
		if tc.servedUpTo < 0 {
			assert.False(t, served(0), "%q, Age %q: never served", tc.cacheControl, tc.age)
			continue
		}
		assert.True(t, served(tc.servedUpTo), "%q, Age %q: served at %v", tc.cacheControl, tc.age, tc.servedUpTo)
		assert.False(t, served(tc.servedUpTo+s), "%q, Age %q: not served at %v", tc.cacheControl, tc.age, tc.servedUpTo+s)
	}
}

// A copy's Age counts the age it came with, and its fields do not replace
// those the response already has when it is served: an outer middleware's
// request ID stays this request's, not the one of the request the copy
// answered.
func TestCopyKeepsTheResponsesOwnFieldsAndItsAge(t *testing.T) {
	c, err := New(8, time.Hour, 1024)
	require.NoError(t, err)
	q := &Request{Key: "k", R: httptest.NewRequest(http.MethodGet, "/", nil)}
	c.Store(q, http.Header{"X-Request-Id": {"first"}, "Age": {"7"}, "Content-Type": {"text/plain"}}, []byte("hello"))
	q = &Request{Key: "k", R: httptest.NewRequest(http.MethodGet, "/", nil), Now: 5 * time.Second}
	h, _, err := c.AnswerValue(WithRequest(context.Background(), q), errors.New("rejected"))
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	rec.Header().Set("X-Request-Id", "second")
	h.ServeHTTP(rec, q.R)
	assert.Equal(t, []string{"second"}, rec.Header().Values("X-Request-Id"))
	assert.Equal(t, "text/plain", rec.Header().Get("Content-Type"))
	assert.Equal(t, "12", rec.Header().Get("Age"))
	assert.Equal(t, "hello", rec.Body.String())
}

// StaleOnly() given no cause (a list from a configuration that came out
// empty) is an error, not the default of answering every rejection, a rate
// limit's 429 among them.
func TestOnlyWithNoCauseIsAnError(t *testing.T) {
	var causes []sluice.Cause // e.g. read from a config file, empty
	c, err := New(8, time.Hour, 1024, Only(causes...))
	if err == nil {
		// Show what it does: it answers a rate limit's rejection.
		r := httptest.NewRequest(http.MethodGet, "/prices", nil)
		c.Store(&Request{Key: "k", R: r}, http.Header{}, []byte("prices"))
		ctx := WithRequest(context.Background(), &Request{Key: "k", R: r})
		_, answers := c.Declared(ctx, sluice.ErrRateLimited)
		t.Errorf("Only() with no cause accepted; the cache answers a rate-limited request: %v", answers)
	}
}

// The cache's memory is bounded by maxEntries and maxBody whatever the
// URIs: a client sending long query strings (net/http accepts a request
// line up to 1 MB) does not make each 2-byte entry cost as much as its URI.
func TestMemoryIsBoundedWhateverTheURI(t *testing.T) {
	const maxEntries, maxBody = 4, 16
	c, err := New(maxEntries, time.Hour, maxBody)
	require.NoError(t, err)
	long := strings.Repeat("a", 512<<10)
	for i := range maxEntries {
		r := httptest.NewRequest(http.MethodGet, "/prices?pad="+long+string(rune('0'+i)), nil)
		c.Store(&Request{Key: "k", R: r}, http.Header{}, []byte("ok"))
	}
	require.Equal(t, maxEntries, c.Len())
	retained := 0
	c.mu.Lock()
	for k, el := range c.entries {
		e := el.Value.(*entry)
		retained += len(k) + len(e.body)
		for hk, hv := range e.header {
			retained += len(hk)
			for _, v := range hv {
				retained += len(v)
			}
		}
	}
	c.mu.Unlock()
	// Generous: maxBody plus 8 KiB of key and fields per entry.
	assert.LessOrEqual(t, retained, maxEntries*(maxBody+8<<10),
		"a cache of %d entries of at most %d body bytes retains %d bytes", maxEntries, maxBody, retained)
}

// A copy kept under a long URI (kept as its digest) answers that URI, and
// no other.
func TestALongURIsCopyAnswersItAlone(t *testing.T) {
	c, err := New(8, time.Hour, 1024, Shared())
	require.NoError(t, err)
	long := "/prices?pad=" + strings.Repeat("a", 4<<10)
	r := httptest.NewRequest(http.MethodGet, long+"1", nil)
	c.Store(&Request{R: r}, http.Header{}, []byte("prices"))
	ctx := WithRequest(context.Background(), &Request{R: r})
	_, ok := c.Declared(ctx, sluice.ErrCircuitOpen)
	assert.True(t, ok, "the copy of the long URI")
	other := httptest.NewRequest(http.MethodGet, long+"2", nil)
	_, ok = c.Declared(WithRequest(context.Background(), &Request{R: other}), sluice.ErrCircuitOpen)
	assert.False(t, ok, "another long URI's copy")
}

// A request's no-store directive (RFC 9111, 5.2.1.5) forbids a cache to
// keep any part of its answer: an uncredentialed one (a one-time link) is
// not kept, nor served to the next client.
func TestRequestNoStoreIsNotKept(t *testing.T) {
	c, err := New(8, time.Hour, 1024, Shared())
	require.NoError(t, err)
	r := httptest.NewRequest(http.MethodGet, "/download?token=abc", nil)
	r.Header.Set("Cache-Control", "no-store")
	c.Store(&Request{R: r}, http.Header{}, []byte("one-time secret"))
	assert.Equal(t, 0, c.Len(), "a response to a request with Cache-Control: no-store is kept")

	other := httptest.NewRequest(http.MethodGet, "/download?token=abc", nil)
	other.RemoteAddr = "198.51.100.9:2000"
	_, _, ok := c.load(WithRequest(context.Background(), &Request{R: other}), sluice.ErrCircuitOpen)
	assert.False(t, ok, "another client is served the copy the first asked not to be stored")
}
