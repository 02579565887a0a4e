package middleware

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
)

type userKey struct{}

func TestKeyer(t *testing.T) {
	ipx, err := NewIPExtractor(IPv6Prefix(64))
	require.NoError(t, err)
	byUser := KeyByContext(func(ctx context.Context) (string, bool) {
		u, ok := ctx.Value(userKey{}).(string)
		return u, ok
	})
	full := fakeRequest{
		ctx:     context.WithValue(context.Background(), userKey{}, "alice"),
		route:   "GET /items/{id}",
		remote:  "[2001:db8::1:2]:443",
		header:  map[string][]string{"X-Api-Key": {"k1"}},
		cookies: map[string]string{"session": "s1"},
	}
	empty := fakeRequest{remote: "pipe"}
	tests := []struct {
		name    string
		fn      KeyFunc
		r       fakeRequest
		want    string
		missing bool
	}{
		{"ip", KeyByIP(ipx), full, "2001:db8::", false},
		{"ip missing", KeyByIP(ipx), empty, "", true},
		{"header", KeyByHeader("X-Api-Key"), full, "k1", false},
		{"header missing", KeyByHeader("X-Api-Key"), empty, "", true},
		{"cookie", KeyByCookie("session"), full, "s1", false},
		{"cookie missing", KeyByCookie("session"), empty, "", true},
		{"context", byUser, full, "alice", false},
		{"context missing", byUser, empty, "", true},
		{"route", KeyByRoute(), full, "GET /items/{id}", false},
		{"route missing", KeyByRoute(), empty, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shared, err := NewKeyer(MissingKey{}, tt.fn)
			require.NoError(t, err)
			k, err := shared.key(tt.r)
			require.NoError(t, err)
			if tt.missing {
				assert.Equal(t, "unknown", k)
			} else {
				assert.Equal(t, tt.want, k)
			}

			strict, err := NewKeyer(RejectMissingKey(), tt.fn)
			require.NoError(t, err)
			k, err = strict.key(tt.r)
			if tt.missing {
				assert.ErrorIs(t, err, ErrMissingKey)
			} else {
				require.NoError(t, err)
				assert.Equal(t, tt.want, k)
			}
		})
	}
}

func TestKeyerFallsThroughInOrder(t *testing.T) {
	k, err := NewKeyer(SharedKey("anon"), KeyByHeader("X-Api-Key"), KeyByCookie("session"))
	require.NoError(t, err)
	got, err := k.key(fakeRequest{cookies: map[string]string{"session": "s9"}})
	require.NoError(t, err)
	assert.Equal(t, "1:s9", got, "with several functions, a key names its function's place")
	got, err = k.key(fakeRequest{})
	require.NoError(t, err)
	assert.Equal(t, "anon", got)

	_, err = NewKeyer(RejectMissingKey())
	assert.Error(t, err)
	_, err = NewKeyer(RejectMissingKey(), nil)
	assert.Error(t, err)
}

func TestKeyerContext(t *testing.T) {
	k, err := NewKeyer(RejectMissingKey(), KeyByHeader("X-Api-Key"))
	require.NoError(t, err)
	ctx, err := k.keyContext(context.Background(), fakeRequest{route: "GET /x", header: map[string][]string{"X-Api-Key": {"k7"}}})
	require.NoError(t, err)
	key, _ := sluice.KeyFrom(ctx)
	res, _ := sluice.ResourceFrom(ctx)
	assert.Equal(t, "k7", key)
	assert.Equal(t, "GET /x", res)

	ctx, err = k.keyContext(context.Background(), fakeRequest{header: map[string][]string{"X-Api-Key": {"k8"}}})
	require.NoError(t, err)
	_, ok := sluice.ResourceFrom(ctx)
	assert.False(t, ok, "no route, no resource")

	_, err = k.keyContext(context.Background(), fakeRequest{})
	assert.ErrorIs(t, err, ErrMissingKey)
}

func TestSkipRoutes(t *testing.T) {
	s := SkipRoutes("GET /healthz", "/grpc.health.v1.Health/Check")
	assert.True(t, s(fakeRequest{route: "GET /healthz"}))
	assert.True(t, s(fakeRequest{route: "/grpc.health.v1.Health/Check"}))
	assert.False(t, s(fakeRequest{route: "GET /items"}))
}

func TestClassifiers(t *testing.T) {
	for status, want := range map[int]sluice.Outcome{
		0: sluice.Success, 101: sluice.Success, 200: sluice.Success, 204: sluice.Success, 304: sluice.Success,
		400: sluice.Ignored, 404: sluice.Ignored, 429: sluice.Ignored, 499: sluice.Ignored,
		500: sluice.Failure, 502: sluice.Failure, 503: sluice.Failure, 599: sluice.Failure, 600: sluice.Ignored,
	} {
		assert.Equal(t, want, ClassifyHTTPStatus(status), status)
	}
}

// A nil *Keyer keys nothing, as its doc says: Key and Context neither panic
// nor put a key or resource in the context.
func TestNilKeyerKeysNothing(t *testing.T) {
	var k *Keyer
	r := fakeRequest{route: "GET /a", header: map[string][]string{"X-Api-Key": {"k1"}}}
	require.NotPanics(t, func() {
		key, err := k.key(r)
		assert.NoError(t, err)
		assert.Empty(t, key)
		ctx, err := k.keyContext(context.Background(), r)
		assert.NoError(t, err)
		_, ok := sluice.KeyFrom(ctx)
		assert.False(t, ok, "no key")
		_, ok = sluice.ResourceFrom(ctx)
		assert.False(t, ok, "no resource")
	})
}

// KeyByIP without an extractor keys by the peer address alone, headers
// ignored, rather than failing on the first request.
func TestKeyByIPWithoutExtractor(t *testing.T) {
	k, err := NewKeyer(RejectMissingKey(), KeyByIP(nil))
	require.NoError(t, err)
	key, err := k.key(fakeRequest{remote: "192.0.2.7:5555", header: map[string][]string{headerXForwardedFor: {"198.51.100.1"}}})
	require.NoError(t, err)
	assert.Equal(t, "192.0.2.7", key)
}

// KeyByIP's key is the address's canonical text, whatever form the peer
// address came in; a peer that holds that text costs no allocation.
func TestKeyByIPText(t *testing.T) {
	v4, err := NewIPExtractor(IPv4Prefix(24))
	require.NoError(t, err)
	proxied, err := NewIPExtractor(TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	xff := map[string][]string{headerXForwardedFor: {"198.51.100.1"}}
	for _, tt := range []struct {
		x            *IPExtractor
		remote, want string
		header       map[string][]string
		free         bool // no allocation
	}{
		{nil, "192.0.2.7:5555", "192.0.2.7", nil, true},
		{nil, "192.0.2.7", "192.0.2.7", nil, true},
		{nil, "[2001:db8::1]:443", "2001:db8::1", nil, true},
		{nil, "2001:db8::1", "2001:db8::1", nil, true},
		{nil, "[2001:db8::1]", "2001:db8::1", nil, true},
		{nil, "[2001:DB8::1]:443", "2001:db8::1", nil, false},
		{nil, "[2001:db8:0::1]:443", "2001:db8::1", nil, false},
		{nil, "[::ffff:192.0.2.7]:80", "192.0.2.7", nil, false},
		{nil, "[fe80::1%eth0]:80", "fe80::1", nil, false},
		{v4, "192.0.2.7:5555", "192.0.2.0", nil, false},
		{proxied, "10.1.2.3:80", "198.51.100.1", xff, false},
	} {
		var r Request = fakeRequest{remote: tt.remote, header: tt.header}
		fn := KeyByIP(tt.x)
		key, ok := fn(r)
		assert.True(t, ok, tt.remote)
		assert.Equal(t, tt.want, key, tt.remote)
		if tt.free {
			assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = fn(r) }), tt.remote)
		}
	}
}

// KeyPerRoute gives each listed route its own key function, and no other:
// a listed route whose function finds no key has none.
func TestKeyPerRoute(t *testing.T) {
	byRoute := map[string]KeyFunc{
		"POST /orders":    KeyByHeader("X-Api-Key"),
		"GET /items/{id}": KeyByIP(nil),
	}
	fn := KeyPerRoute(byRoute, KeyByRoute())
	byRoute["POST /orders"] = nil // the map was copied
	k, err := NewKeyer(RejectMissingKey(), fn)
	require.NoError(t, err)
	for _, tt := range []struct {
		r    fakeRequest
		want string
	}{
		{fakeRequest{route: "POST /orders", remote: "192.0.2.1:1", header: map[string][]string{"X-Api-Key": {"k1"}}}, "k1"},
		{fakeRequest{route: "GET /items/{id}", remote: "192.0.2.1:1", header: map[string][]string{"X-Api-Key": {"k1"}}}, "192.0.2.1"},
		{fakeRequest{route: "GET /other", remote: "192.0.2.1:1"}, "GET /other"},
	} {
		got, err := k.key(tt.r)
		require.NoError(t, err, tt.r.route)
		assert.Equal(t, tt.want, got, tt.r.route)
	}
	_, err = k.key(fakeRequest{route: "POST /orders", remote: "192.0.2.1:1"})
	assert.ErrorIs(t, err, ErrMissingKey, "not keyed by address instead")
	none := KeyPerRoute(map[string]KeyFunc{"GET /a": nil}, nil)
	_, ok := none(fakeRequest{route: "GET /a"})
	assert.False(t, ok)
	_, ok = none(fakeRequest{route: "GET /b"})
	assert.False(t, ok)
}

// The keys of different functions of one Keyer never meet: a client that
// sends an API key spelt as another client's address does not draw on
// that address's budget.
func TestKeyerKeysOfDifferentFunctionsDoNotMeet(t *testing.T) {
	k, err := NewKeyer(SharedKey("anonymous"), KeyByHeader("X-Api-Key"), KeyByIP(nil))
	require.NoError(t, err)
	victim, err := k.key(fakeRequest{remote: "203.0.113.9:5555"})
	require.NoError(t, err)
	attacker, err := k.key(fakeRequest{remote: "198.51.100.1:4444", header: map[string][]string{"X-Api-Key": {"203.0.113.9"}}})
	require.NoError(t, err)
	assert.Equal(t, "1:203.0.113.9", victim)
	assert.Equal(t, "203.0.113.9", attacker, "the first function's keys are as it finds them")
	spelt, err := k.key(fakeRequest{remote: "198.51.100.1:4444", header: map[string][]string{"X-Api-Key": {"1:203.0.113.9"}}})
	require.NoError(t, err)
	assert.Equal(t, "0:1:203.0.113.9", spelt, "unless spelt as another's")
	alice := fakeRequest{remote: "198.51.100.1:4444", header: map[string][]string{"X-Api-Key": {"alice"}}}
	var req Request = &alice
	allocs := testing.AllocsPerRun(100, func() { _, _ = k.key(req) })
	assert.Zero(t, allocs, "the first function's key costs no join")
	one, err := NewKeyer(SharedKey("anonymous"), KeyByIP(nil))
	require.NoError(t, err)
	got, err := one.key(fakeRequest{remote: "203.0.113.9:5555"})
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.9", got, "one function's keys are as it finds them")
}

// A KeyBy… given a nil or empty argument is refused by NewKeyer, not a
// panic or a key never found on the request path.
func TestKeyerRefusesKeyFunctionsOfNothing(t *testing.T) {
	for name, fn := range map[string]KeyFunc{
		"KeyByContext(nil)": KeyByContext(nil),
		"KeyByHeader(\"\")": KeyByHeader(""),
		"KeyByCookie(\"\")": KeyByCookie(""),
	} {
		_, err := NewKeyer(RejectMissingKey(), KeyByRoute(), fn)
		assert.ErrorContains(t, err, "key function 1 is a KeyBy… given a nil or empty argument", name)
		// Nor in KeyPerRoute, where a nil function is a route without a key.
		_, err = NewKeyer(SharedKey("anonymous"), KeyPerRoute(map[string]KeyFunc{"POST /orders": fn}, KeyByIP(nil)))
		assert.Error(t, err, "%s as a route's key function", name)
		_, err = NewKeyer(SharedKey("anonymous"), KeyPerRoute(map[string]KeyFunc{"GET /health": nil}, fn))
		assert.Error(t, err, "%s as every other route's", name)
	}
	_, err := NewKeyer(SharedKey("anonymous"), KeyPerRoute(map[string]KeyFunc{"GET /health": nil}, KeyByIP(nil)))
	assert.NoError(t, err, "a route without a key")
}
