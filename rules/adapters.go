package rules

import (
	"net/http"
	"slices"
	"sync/atomic"

	"github.com/labstack/echo/v4"

	sluiceecho "github.com/sluice-go/sluice/middleware/echo"
	sluicehttp "github.com/sluice-go/sluice/middleware/http"
)

// HTTP returns net/http middleware that serves the rules in force: each
// request runs through the Guard its route maps to, with the key the
// file's guard declares, as sluicehttp.Middleware does with the rules'
// route table. After a reload, the next request is served by the new
// rules, with no restart. opts are given to sluicehttp.Middleware for
// every set of rules (WithRouteFunc, WithDenyHandler, WithRenderer, ...);
// the route table is the file's, so WithRoutes or WithGuard among them is
// an error, and a WithKeyer is replaced whenever the file declares a key.
// A later load whose rules the middleware would refuse fails, and the
// rules in force stay.
func (l *Loader) HTTP(opts ...sluicehttp.Option) (func(http.Handler) http.Handler, error) {
	opts = slices.Clip(opts)
	build := func(st *state) (func(http.Handler) http.Handler, error) {
		o := append(opts, sluicehttp.WithRoutes(st.routes))
		if st.keyer != nil {
			o = append(o, sluicehttp.WithKeyer(st.keyer))
		}
		return sluicehttp.Middleware(o...)
	}
	st, first, err := follow(l, build)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		f := newFollower(l, st, first(next), func(st *state) (http.Handler, error) {
			mw, err := build(st)
			if err != nil {
				return nil, err
			}
			return mw(next), nil
		})
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f.get().ServeHTTP(w, r)
		})
	}, nil
}

// Echo returns Echo middleware that serves the rules in force, as HTTP
// does for net/http, with sluiceecho.Middleware; opts are sluiceecho's,
// under the same terms.
func (l *Loader) Echo(opts ...sluiceecho.Option) (echo.MiddlewareFunc, error) {
	opts = slices.Clip(opts)
	build := func(st *state) (echo.MiddlewareFunc, error) {
		o := append(opts, sluiceecho.WithRoutes(st.routes))
		if st.keyer != nil {
			o = append(o, sluiceecho.WithKeyer(st.keyer))
		}
		return sluiceecho.Middleware(o...)
	}
	st, first, err := follow(l, build)
	if err != nil {
		return nil, err
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		f := newFollower(l, st, first(next), func(st *state) (echo.HandlerFunc, error) {
			mw, err := build(st)
			if err != nil {
				return nil, err
			}
			return mw(next), nil
		})
		return func(c echo.Context) error { return f.get()(c) }
	}, nil
}

// follow builds an adapter's middleware for the rules in force with build,
// and has every later load run build on its new rules before they come
// into force, so that a load the adapter would refuse fails.
func follow[M any](l *Loader, build func(*state) (M, error)) (*state, M, error) {
	l.adaptersMu.Lock()
	defer l.adaptersMu.Unlock()
	st := l.cur.Load()
	first, err := build(st)
	if err != nil {
		return nil, first, err
	}
	l.adapters = append(l.adapters, func(st *state) error {
		_, err := build(st)
		return err
	})
	return st, first, nil
}

// follower holds an adapter's handler of the rules in force, and makes the
// handler of new rules the first time a request finds them loaded.
type follower[H any] struct {
	l   *Loader
	mk  func(*state) (H, error)
	cur atomic.Pointer[served[H]]
}

// served is the handler made for one set of rules.
type served[H any] struct {
	st *state
	h  H
}

func newFollower[H any](l *Loader, st *state, h H, mk func(*state) (H, error)) *follower[H] {
	f := &follower[H]{l: l, mk: mk}
	f.cur.Store(&served[H]{st: st, h: h})
	return f
}

// get returns the handler of the rules in force. Requests racing to new
// rules may each make their handler; any will do.
func (f *follower[H]) get() H {
	s := f.cur.Load()
	st := f.l.cur.Load()
	if s.st == st {
		return s.h
	}
	ns := &served[H]{st: st, h: s.h}
	if h, err := f.mk(st); err != nil {
		f.l.log.Error("sluice rules: the middleware refused the rules; it serves the previous ones", "error", err)
	} else {
		ns.h = h
	}
	f.cur.Store(ns)
	return ns.h
}
