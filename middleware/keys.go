package middleware

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"reflect"
	"strconv"
	"strings"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/reqid"
)

// Request is what the adapters show of a request to key functions and
// skippers, whatever its transport.
type Request interface {
	// Context is the request's context.
	Context() context.Context
	// Route is the route the request matched ("" when unknown): the HTTP
	// pattern, the gRPC full method.
	Route() string
	// RemoteAddr is the direct peer's address, "host:port" or bare.
	RemoteAddr() string
	// Header returns every value of a header or metadata field; nil when
	// absent.
	Header(name string) []string
	// Cookie returns the value of the named cookie; false when absent or
	// when the transport has no cookies.
	Cookie(name string) (string, bool)
}

// KeyFunc returns the key a request is limited under, and false when the
// request carries none.
type KeyFunc func(r Request) (key string, ok bool)

// KeyByIP keys requests by their client address as e finds it, masked to
// e's prefixes. A nil e keys them by their peer address alone, as an
// IPExtractor with no trusted proxies does.
func KeyByIP(e *IPExtractor) KeyFunc {
	if e == nil {
		e, _ = NewIPExtractor()
	}
	return func(r Request) (string, bool) {
		peer := r.RemoteAddr()
		a, ok := e.ClientIP(peer, r.Header)
		if !ok {
			return "", false
		}
		return addrKey(a, peer), true
	}
}

// addrKey returns a's text. When the peer address holds that very text
// (a client that connected itself, unmasked, as IPv4 addresses usually
// are: "192.0.2.7:5555", "[2001:db8::1]:443", "192.0.2.7"), it is that
// part of peer, and costs no allocation.
func addrKey(a netip.Addr, peer string) string {
	var buf [48]byte
	b := a.AppendTo(buf[:0])
	n := len(b)
	switch {
	case len(peer) == n && peer == string(b):
		return peer
	case len(peer) > n && peer[n] == ':' && peer[:n] == string(b):
		return peer[:n]
	case len(peer) > n+1 && peer[0] == '[' && peer[n+1] == ']' && peer[1:n+1] == string(b):
		return peer[1 : n+1]
	}
	return string(b)
}

// KeyByHeader keys requests by the first value of a header (an API key, a
// tenant id); requests without it, or with an empty one, have no key. An
// empty name makes a KeyFunc that NewKeyer refuses, alone or in KeyPerRoute.
func KeyByHeader(name string) KeyFunc {
	if name == "" {
		return invalidKey
	}
	return func(r Request) (string, bool) {
		v := r.Header(name)
		if len(v) == 0 || v[0] == "" {
			return "", false
		}
		return v[0], true
	}
}

// KeyByCookie keys requests by a cookie's value. An empty name makes a
// KeyFunc that NewKeyer refuses, alone or in KeyPerRoute.
func KeyByCookie(name string) KeyFunc {
	if name == "" {
		return invalidKey
	}
	return func(r Request) (string, bool) {
		v, ok := r.Cookie(name)
		if !ok || v == "" {
			return "", false
		}
		return v, true
	}
}

// KeyByContext keys requests by a value an earlier middleware put in the
// context, typically the authenticated user: fn returns it, and false when
// there is none. A nil fn makes a KeyFunc that NewKeyer refuses, alone or
// in KeyPerRoute.
func KeyByContext(fn func(ctx context.Context) (string, bool)) KeyFunc {
	if fn == nil {
		return invalidKey
	}
	return func(r Request) (string, bool) {
		k, ok := fn(r.Context())
		if !ok || k == "" {
			return "", false
		}
		return k, true
	}
}

// KeyByRoute keys requests by their route, so that each route has its own
// quota within one Guard.
func KeyByRoute() KeyFunc {
	return func(r Request) (string, bool) {
		rt := r.Route()
		return rt, rt != ""
	}
}

// KeyPerRoute keys the requests of each route in byRoute (named as the
// adapter names a request's Route: an http.ServeMux pattern, a gRPC full
// method, Echo's route path or the "POST /cart" table entry it matched) with
// that route's function alone (a nil one: no key), and the requests of every
// other route with other (nil: they have no key). A route whose function
// finds no key has none: other is not asked for it, so that, say, an order
// without its API key is not keyed by its client address instead. The map is
// copied.
func KeyPerRoute(byRoute map[string]KeyFunc, other KeyFunc) KeyFunc {
	for _, fn := range byRoute {
		if invalid(fn) {
			return invalidKey
		}
	}
	if invalid(other) {
		return invalidKey
	}
	m := maps.Clone(byRoute)
	return func(r Request) (string, bool) {
		if fn, ok := m[r.Route()]; ok {
			if fn == nil {
				return "", false
			}
			return fn(r)
		}
		if other == nil {
			return "", false
		}
		return other(r)
	}
}

// invalidKey is the KeyFunc of a KeyBy… given a nil or empty argument: one
// that NewKeyer refuses, alone or in KeyPerRoute (where a nil function
// means a route without a key).
func invalidKey(Request) (string, bool) { return "", false }

// invalid reports whether fn is invalidKey.
func invalid(fn KeyFunc) bool {
	return fn != nil && reflect.ValueOf(fn).Pointer() == reflect.ValueOf(invalidKey).Pointer()
}

// ErrMissingKey is returned by a Keyer built with RejectMissingKey for a
// request that carries no key. Adapters answer it with 400 Bad Request (gRPC
// InvalidArgument).
var ErrMissingKey = errors.New("middleware: the request carries no key to limit it by")

// MissingKey is what a Keyer does with a request none of its KeyFuncs keys.
// The zero value puts such requests in one shared bucket keyed "unknown".
type MissingKey struct {
	reject bool
	key    string
}

// RejectMissingKey makes a Keyer reject requests without a key with
// ErrMissingKey.
func RejectMissingKey() MissingKey { return MissingKey{reject: true} }

// SharedKey makes a Keyer put requests without a key in one bucket, keyed
// key, that they share.
func SharedKey(key string) MissingKey { return MissingKey{key: key} }

// Keyer finds the key of a request: the first of its KeyFuncs that returns
// one, else what its MissingKey says. A Keyer is immutable and safe for
// concurrent use; a nil *Keyer keys nothing.
type Keyer struct {
	fns      []KeyFunc
	prefixes []string // of each function's keys, with several
	missing  MissingKey
	// noClient is, for a Keyer that rejects the requests without a key,
	// a key its functions give some of them all the same (see keyhook).
	noClient string
}

// NewKeyer builds a Keyer that tries fns in order. With more than one, the
// keys of each but the first start with its place in fns ("1:", "2:", …),
// and so do those of the first that would start so otherwise ("0:"), so
// that keys of different kinds never share a budget: a client sending an
// API key spelt as another client's address does not draw on that
// address's. A nil function, or a KeyBy… given a nil or empty argument, is
// an error.
func NewKeyer(missing MissingKey, fns ...KeyFunc) (*Keyer, error) {
	if len(fns) == 0 {
		return nil, errors.New("middleware: NewKeyer: no key function")
	}
	k := &Keyer{fns: append([]KeyFunc(nil), fns...)}
	for i, f := range fns {
		if f == nil {
			return nil, errors.New("middleware: NewKeyer: key function " + strconv.Itoa(i) + " is nil")
		}
		if invalid(f) {
			return nil, errors.New("middleware: NewKeyer: key function " + strconv.Itoa(i) + " is a KeyBy… given a nil or empty argument")
		}
		if len(fns) > 1 {
			k.prefixes = append(k.prefixes, strconv.Itoa(i)+":")
		}
	}
	if !missing.reject && missing.key == "" {
		missing.key = "unknown"
	}
	k.missing = missing
	return k, nil
}

// prefixed reports whether key starts with one of k's prefixes: a key of
// its first function that could be taken for another's.
func (k *Keyer) prefixed(key string) bool {
	for _, p := range k.prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// key returns r's key, or ErrMissingKey when r has none and the Keyer
// rejects such requests. A nil Keyer returns "" and no error.
func (k *Keyer) key(r Request) (string, error) {
	if k == nil {
		return "", nil
	}
	for i, f := range k.fns {
		if key, ok := f(r); ok {
			if k.prefixes != nil && (i > 0 || k.prefixed(key)) {
				key = k.prefixes[i] + key
			}
			return key, nil
		}
	}
	if k.missing.reject {
		return "", ErrMissingKey
	}
	return k.missing.key, nil
}

// keyContext returns ctx carrying r's key (sluice.WithKey) and, when r has a
// route, the route as its resource (sluice.WithResource), for the keyed
// policies of a Guard. It returns ErrMissingKey as key does. A nil Keyer
// returns ctx as it is.
func (k *Keyer) keyContext(ctx context.Context, r Request) (context.Context, error) {
	if k == nil {
		return ctx, nil
	}
	key, err := k.key(r)
	if err != nil {
		return ctx, err
	}
	if rt := r.Route(); rt != "" {
		return reqid.WithKeyAndResource(ctx, key, rt), nil
	}
	return sluice.WithKey(ctx, key), nil
}

// SkipRoutes returns a skipper for the gRPC interceptors' WithSkipper: it
// reports true, the request bypasses the guard entirely, for requests whose
// route is one of routes (health checks, metrics).
func SkipRoutes(routes ...string) func(r Request) bool {
	set := make(map[string]struct{}, len(routes))
	for _, r := range routes {
		set[r] = struct{}{}
	}
	return func(r Request) bool {
		_, ok := set[r.Route()]
		return ok
	}
}
