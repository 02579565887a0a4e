package middleware

import "context"

// fakeRequest is a Request with fixed fields.
type fakeRequest struct {
	ctx     context.Context
	route   string
	remote  string
	header  map[string][]string
	cookies map[string]string
}

func (r fakeRequest) Context() context.Context {
	if r.ctx == nil {
		return context.Background()
	}
	return r.ctx
}
func (r fakeRequest) Route() string               { return r.route }
func (r fakeRequest) RemoteAddr() string          { return r.remote }
func (r fakeRequest) Header(name string) []string { return r.header[name] }
func (r fakeRequest) Cookie(name string) (string, bool) {
	v, ok := r.cookies[name]
	return v, ok
}
