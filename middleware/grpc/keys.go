package sluicegrpc

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

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
