package sluicegrpc

import (
	"context"
	"strings"
	"sync"

	"github.com/sluice-go/sluice/middleware"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// KeyByPeer keys calls by the client's address as e finds it: the peer's
// address, or, when the peer is one of e's trusted proxies, the right-most
// untrusted address of the x-forwarded-for (or forwarded, x-real-ip)
// metadata. Calls over a connection without an IP address (a Unix socket,
// an in-memory listener) have no key.
func KeyByPeer(e *middleware.IPExtractor) middleware.KeyFunc { return middleware.KeyByIP(e) }

// KeyByMetadata keys calls by the first value of the metadata field name
// (an API key, a tenant id): the incoming metadata on a server, the outgoing
// metadata on a client. Calls without it have no key.
func KeyByMetadata(name string) middleware.KeyFunc { return middleware.KeyByHeader(name) }

// KeyByContext keys calls by a value an earlier interceptor put in the
// context (the authenticated user): fn returns it, and false when there is
// none.
func KeyByContext(fn func(ctx context.Context) (string, bool)) middleware.KeyFunc {
	return middleware.KeyByContext(fn)
}

// KeyByMethod keys calls by their full method, so that each method has its
// own quota within one Guard.
func KeyByMethod() middleware.KeyFunc { return middleware.KeyByRoute() }

// request shows a gRPC call to key functions and skippers as a
// middleware.Request. md is the tap's header metadata; when nil, the
// incoming metadata of ctx is read.
type request struct {
	ctx      context.Context
	method   string
	md       metadata.MD
	outgoing bool // a client call: the headers are the outgoing metadata
}

var requests = sync.Pool{New: func() any { return new(request) }}

func getRequest(ctx context.Context, method string, md metadata.MD) *request {
	r := requests.Get().(*request)
	r.ctx, r.method, r.md = ctx, method, md
	return r
}

func putRequest(r *request) {
	*r = request{}
	requests.Put(r)
}

func (r *request) Context() context.Context { return r.ctx }
func (r *request) Route() string            { return r.method }

func (r *request) RemoteAddr() string {
	if r.outgoing {
		return ""
	}
	p, ok := peer.FromContext(r.ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	return p.Addr.String()
}

func (r *request) Header(name string) []string {
	name = strings.ToLower(name)
	if r.md != nil {
		return r.md[name]
	}
	if r.outgoing {
		md, _ := metadata.FromOutgoingContext(r.ctx)
		return md[name]
	}
	return metadata.ValueFromIncomingContext(r.ctx, name)
}

func (r *request) Cookie(string) (string, bool) { return "", false }
