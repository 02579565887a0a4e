package sluicehttp

import (
	"context"
	"net/http"
)

// request shows an *http.Request as a middleware.Request.
type request struct {
	r       *http.Request
	pattern string
}

func (q *request) Context() context.Context    { return q.r.Context() }
func (q *request) Route() string               { return q.pattern }
func (q *request) RemoteAddr() string          { return q.r.RemoteAddr }
func (q *request) Header(name string) []string { return q.r.Header.Values(name) }
func (q *request) Cookie(name string) (string, bool) {
	c, err := q.r.Cookie(name)
	if err != nil {
		return "", false
	}
	return c.Value, true
}
