// Package routing is the part of package middleware that only the adapters
// use: the route table behind middleware.Routes and what it knows of each
// route, the rendering of a Decision into header fields and a problem body,
// and the lookup of fallbacks by route and cause.
package routing

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/internal/policywindow"
)

// Route is one entry of a [Routes] table: the Guard that protects the route
// and what the table learnt about the Guard's policies when it was built.
// A nil *Route lets every request through.
type Route struct {
	// Pattern is the route as it was registered: an HTTP pattern, a gRPC full
	// method; "" for the default route.
	Pattern string
	// Guard protects the route; nil lets every request through.
	Guard *sluice.Guard
	// Timed is set when Guard has a call timeout: a call's Context is then
	// its own, to run the handler with.
	Timed    bool
	policies []policySlot
	// windows are the policies' windows, by their index in policies, read
	// at the epoch winEpoch of package policywindow: read again, under
	// winMu, when it moves.
	windows  atomic.Pointer[[]time.Duration]
	winEpoch atomic.Uint64
	winMu    sync.Mutex
	other    atomic.Pointer[policyFields] // for decisions of policies not in the chain
	foreign  atomic.Pointer[policyFields] // for rejections by another Guard (see fields)
	problem  atomic.Pointer[Problem]      // the route's last problem answer
	// quoted is the policy whose fields the route's last admitted answer
	// carried: the one Renderer.Admitted tries first.
	quoted atomic.Pointer[policyFields]
}

// policySlot is what a Route knows of one policy of its Guard, and the
// header values that depend only on the policy's name, quota and window,
// made once and shared by every response.
type policySlot struct {
	name   string
	policy sluice.Policy
	fields atomic.Pointer[policyFields]
}

// policyFields are the header values of one policy's quota. They are
// immutable once made; the slices have no spare capacity, so a handler that
// appends to them copies.
type policyFields struct {
	name   string
	limit  int64
	window time.Duration
	// epoch is the policywindow epoch at which window was last found to be
	// the policy's: the route's last quoted answer is reused only then.
	epoch  atomic.Uint64
	policy []string // RateLimit-Policy
	limitV []string // X-RateLimit-Limit
	prefix string   // RateLimit up to r's value: "name";r=
	// last is a recent RateLimit value made for the policy (one in
	// shareEvery is kept): while the policy's r and t stay the same (a limit
	// well above the traffic keeps r at the burst less one), responses share
	// it instead of formatting their own.
	last atomic.Pointer[rateLimitValue]
}

// kept returns the RateLimit value the policy keeps when its r and t are
// these; nil otherwise.
func (pf *policyFields) kept(r, t int64) *rateLimitValue {
	if c := pf.last.Load(); c != nil && c.r == r && c.t == t {
		return c
	}
	return nil
}

func newPolicyFields(name string, limit int64, window time.Duration) *policyFields {
	b := AppendRateLimitPolicy(nil, name, limit, window)
	pol := string(b)
	pre := string(append(appendSFString(nil, name), ";r="...))
	lim := itoa(sfInt(limit))
	return &policyFields{
		name: name, limit: limit, window: window,
		policy: []string{pol}, limitV: []string{lim}, prefix: pre,
	}
}

func newRoute(pattern string, g *sluice.Guard) *Route {
	ps := g.Policies()
	r := &Route{Pattern: pattern, Guard: g, Timed: guardhook.Timed(g), policies: make([]policySlot, len(ps))}
	for i, p := range ps {
		r.policies[i].name, r.policies[i].policy = p.Name(), p
	}
	r.readWindows()
	return r
}

// readWindows reads the windows of the route's policies (a fixed or sliding
// window's size, a token bucket's time to refill its burst), which fill the
// w parameter of the RateLimit-Policy field; a policy without one gets no
// w. It returns them and the epoch they were read at. The epoch moves at
// every SetLimit, a Keyed limiter's new keys' among them: windows found
// unchanged are kept, and cost no allocation.
func (r *Route) readWindows() ([]time.Duration, uint64) {
	r.winMu.Lock()
	defer r.winMu.Unlock()
	e := policywindow.Epoch()
	cur := r.windows.Load()
	if cur != nil && r.winEpoch.Load() == e {
		return *cur, e
	}
	var buf [8]time.Duration
	of := buf[:0]
	for i := range r.policies {
		of = append(of, policywindow.Of(r.policies[i].policy))
	}
	// Policies may share a name (two limiters of one algorithm, each with
	// its default name) and a Decision names only the policy: when their
	// windows differ, which one decided is unknown, and the w parameter is
	// left out rather than given wrong.
	for i := range r.policies {
		for j := range i {
			if r.policies[i].name == r.policies[j].name && of[i] != of[j] {
				of[i], of[j] = 0, 0
			}
		}
	}
	if cur == nil || !slices.Equal(*cur, of) {
		ws := slices.Clone(of)
		cur = &ws
		r.windows.Store(cur)
	}
	r.winEpoch.Store(e)
	return *cur, e
}

// windowsNow returns the windows of the route's policies, read again when a
// policy's SetLimit may have changed one since they were read, and the
// epoch they were read at (or an earlier one).
func (r *Route) windowsNow() ([]time.Duration, uint64) {
	if e := policywindow.Epoch(); r.winEpoch.Load() == e {
		return *r.windows.Load(), e
	}
	return r.readWindows()
}

// Window returns the window of the route's policy named policy, as package
// policywindow reports it, or 0 when it has none.
func (r *Route) Window(policy string) time.Duration {
	if r == nil {
		return 0
	}
	for i := range r.policies {
		if r.policies[i].name == policy {
			ws, _ := r.windowsNow()
			return ws[i]
		}
	}
	return 0
}

// fields returns the quota fields of d's policy, made once per policy and
// quota and shared after. own tells a decision of the route's Guard from a
// rejection by another Guard that a handler met (a dependency's limiter):
// that one's window is unknown (a policy of the same name here may have
// another), and its fields name none.
func (r *Route) fields(d *sluice.Decision, own bool) *policyFields {
	if r == nil {
		return newPolicyFields(d.Policy, d.Limit, 0)
	}
	slot := &r.other
	var window time.Duration
	if !own {
		slot = &r.foreign
	}
	ws, epoch := r.windowsNow()
	for i := range r.policies {
		if own && r.policies[i].name == d.Policy {
			slot, window = &r.policies[i].fields, ws[i]
			break
		}
	}
	if f := slot.Load(); f != nil && f.name == d.Policy && f.limit == d.Limit && f.window == window {
		if f.epoch.Load() != epoch {
			f.epoch.Store(epoch)
		}
		return f
	}
	f := newPolicyFields(d.Policy, d.Limit, window)
	f.epoch.Store(epoch)
	slot.Store(f)
	return f
}

// Routes maps routes to Guards, with a default for routes it does not list.
// A route mapped to a nil Guard, or an unlisted route when there is no
// default, passes through unguarded. The zero value, and a nil *Routes, guard
// nothing. A Routes is immutable once built and safe for concurrent use.
type Routes struct {
	byPattern map[string]*Route
	def       *Route
	methods   bool // some pattern names a method ("POST /cart")
}

// RoutesOption configures a Routes table.
type RoutesOption func(*Routes) error

// RouteTo maps pattern (an HTTP pattern such as "GET /items/{id}", a gRPC full
// method such as "/pkg.Service/Method") to g. A nil g makes the route pass
// through even when the table has a default.
func RouteTo(pattern string, g *sluice.Guard) RoutesOption {
	return func(rs *Routes) error {
		if pattern == "" {
			return errors.New("middleware: RouteTo: empty pattern (use DefaultRoute for the default)")
		}
		if err := checkPattern(pattern); err != nil {
			return fmt.Errorf("middleware: RouteTo: malformed pattern %q: %w", pattern, err)
		}
		if _, dup := rs.byPattern[pattern]; dup {
			return fmt.Errorf("middleware: RouteTo: route %q given twice", pattern)
		}
		rs.byPattern[pattern] = newRoute(pattern, g)
		if strings.Contains(pattern, " ") {
			rs.methods = true
		}
		return nil
	}
}

// DefaultRoute makes g guard every route the table does not list. Without it,
// unlisted routes pass through.
func DefaultRoute(g *sluice.Guard) RoutesOption {
	return func(rs *Routes) error {
		if rs.def != nil {
			return errors.New("middleware: DefaultRoute given twice")
		}
		rs.def = newRoute("", g)
		return nil
	}
}

// NewRoutes builds a route table.
func NewRoutes(opts ...RoutesOption) (*Routes, error) {
	rs := &Routes{byPattern: make(map[string]*Route)}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("middleware: NewRoutes: option %d is nil", i)
		}
		if err := o(rs); err != nil {
			return nil, err
		}
	}
	if rs.def != nil && rs.def.Guard == nil {
		rs.def = nil
	}
	return rs, nil
}

// Match returns the Route for pattern: its own entry, else the default, else
// nil (pass through).
func (rs *Routes) Match(pattern string) *Route {
	if rs == nil {
		return nil
	}
	if len(rs.byPattern) > 0 {
		if r, ok := rs.byPattern[pattern]; ok {
			if r.Guard == nil {
				return nil
			}
			return r
		}
	}
	return rs.def
}

// MatchMethod returns the Route for a request of method on route path, for
// routers whose routes carry no method (Echo's c.Path()): the entry
// "METHOD path", as net/http patterns name a method, when the table lists
// it, else Match(path). As in net/http, a HEAD request without a "HEAD path"
// entry matches the "GET path" one.
func (rs *Routes) MatchMethod(method, path string) *Route {
	if rs != nil && rs.methods {
		if r, ok := rs.byMethod(method, path); ok {
			return r
		}
		if method == http.MethodHead {
			if r, ok := rs.byMethod(http.MethodGet, path); ok {
				return r
			}
		}
	}
	return rs.Match(path)
}

// byMethod returns the Route of the entry "method path", nil for one mapped
// to a nil Guard, and whether the table lists it.
func (rs *Routes) byMethod(method, path string) (*Route, bool) {
	var buf [128]byte
	key := append(append(append(buf[:0], method...), ' '), path...)
	r, ok := rs.byPattern[string(key)] // the lookup allocates nothing
	if !ok || r.Guard == nil {
		return nil, ok
	}
	return r, true
}

// Default returns the default Route, or nil when there is none.
func (rs *Routes) Default() *Route {
	if rs == nil {
		return nil
	}
	return rs.def
}

// NeedsPattern reports whether the table lists any route, that is whether
// an adapter must work out a request's route before calling Match. When it
// reports false, Match answers the default for every route.
func (rs *Routes) NeedsPattern() bool { return rs != nil && len(rs.byPattern) > 0 }

// Guards returns every distinct non-nil Guard of the table, the default
// first; for closing them together.
func (rs *Routes) Guards() []*sluice.Guard {
	if rs == nil {
		return nil
	}
	seen := make(map[*sluice.Guard]bool)
	var out []*sluice.Guard
	add := func(r *Route) {
		if r != nil && r.Guard != nil && !seen[r.Guard] {
			seen[r.Guard] = true
			out = append(out, r.Guard)
		}
	}
	add(rs.def)
	for _, r := range rs.byPattern {
		add(r)
	}
	return out
}

// checkPattern reports a malformed wildcard in pattern: a segment that opens
// "{" without closing it, closes "}" without opening it, or names nothing.
// Patterns are otherwise taken as given (a net/http pattern, an Echo path, a
// gRPC full method), and a wildcard must be a whole segment, as in net/http:
// "{id}", "{path...}".
func checkPattern(pattern string) error {
	path := pattern
	if i := strings.IndexByte(path, ' '); i >= 0 {
		path = path[i+1:]
	}
	segs := strings.Split(path, "/")
	var names []string
	for i, seg := range segs {
		if !strings.ContainsAny(seg, "{}") {
			continue
		}
		if len(seg) < 2 || seg[0] != '{' || seg[len(seg)-1] != '}' || strings.ContainsAny(seg[1:len(seg)-1], "{}") {
			return fmt.Errorf("bad wildcard segment %q: a wildcard is a whole segment, {name} or {name...}", seg)
		}
		last := i == len(segs)-1
		name, rest := strings.CutSuffix(seg[1:len(seg)-1], "...")
		switch {
		case i == 0 && path != "":
			return fmt.Errorf("wildcard %q in the host: a route's host is literal", seg)
		case name == "":
			return fmt.Errorf("wildcard segment %q has no name", seg)
		case rest && !last:
			return fmt.Errorf("wildcard %q matches the rest of the path: it must be the last segment", seg)
		case name == "$" && (rest || !last):
			return fmt.Errorf("{$} ends a path: it must be the last segment")
		case slices.Contains(names, name):
			return fmt.Errorf("wildcard %q is named twice", name)
		}
		names = append(names, name)
	}
	return nil
}
