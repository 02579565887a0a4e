// Package apikey is the stand-in authentication of the examples that limit
// per caller (per-route, redis-fleet): a table of issued API keys, a
// middleware that puts the caller in the request's context, and key
// functions that name their keys by kind.
//
// A limit is only as good as the identity it counts under: a header the
// client chooses is none, since any client could mint a fresh budget with a
// made-up key. So in production the key must be the authenticated
// principal, which the service's authentication puts in the context and
// middleware.KeyByContext reads, as the examples do with this package.
package apikey

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"github.com/sluice-go/sluice/middleware"
)

// issued are the API keys the service issued, each with the caller it
// identifies. A real service checks a credential against its own store.
var issued = map[string]string{"alice": "alice", "bob": "bob"}

type callerKey struct{}

// Authenticate answers a request with an API key (X-Api-Key) the service
// did not issue with 401, and puts the caller of an issued one in the
// request's context. A request without a key goes on, for the next handler
// to limit by its address or to refuse.
func Authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if key := r.Header.Get("X-Api-Key"); key != "" {
			caller, ok := issued[key]
			if !ok {
				http.Error(w, "unknown API key", http.StatusUnauthorized)
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), callerKey{}, caller))
		}
		next.ServeHTTP(w, r)
	})
}

// CallerFrom returns the caller Authenticate put in ctx, for
// middleware.KeyByContext.
func CallerFrom(ctx context.Context) (string, bool) {
	caller, ok := ctx.Value(callerKey{}).(string)
	return caller, ok
}

// maxKeyLen is the longest key kept as it is; longer ones are hashed.
const maxKeyLen = 64

// Namespaced prefixes fn's keys with their kind, so that they read plainly
// (a Keyer of several functions keeps them apart already), and replaces a
// key longer than 64 bytes with its SHA-256, so that no request makes a
// limiter keep a large key.
func Namespaced(prefix string, fn middleware.KeyFunc) middleware.KeyFunc {
	return func(r middleware.Request) (string, bool) {
		key, ok := fn(r)
		if !ok {
			return "", false
		}
		if len(key) > maxKeyLen {
			sum := sha256.Sum256([]byte(key))
			key = "sha256:" + hex.EncodeToString(sum[:])
		}
		return prefix + key, true
	}
}
