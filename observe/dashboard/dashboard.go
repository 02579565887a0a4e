package dashboard

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/internal/statsmath"
	"github.com/sluice-go/sluice/ratelimit"
)

// Dashboard shows the Guards it observes on a live page. It is a
// [sluice.Observer] and an [http.Handler]; make one with [New]. It starts
// no goroutine: the page's streams run on the server's.
type Dashboard struct {
	authorize func(*http.Request) bool
	log       *slog.Logger
	rules     func() (version string, loaded time.Time, err error)
	switches  []*degrade.Switch
	cpu       func() float64  // WithCPU
	hosts     map[string]bool // WithHosts
	secret    [32]byte        // signs the pages' tokens
	csrf      *http.CrossOriginProtection

	series series
	events events

	mu        sync.Mutex
	guards    []*guardWatch // by name
	rulesMu   sync.Mutex    // orders the reads of the rules' status
	rulesSeen rulesView     // the rules status last shown
	redis     []*redisSeen  // one a Redis limiter; see redis.go
	// retired are the watches let go of whose Guard may still serve (a
	// rules reload's, not yet retired), by name: the next Guard of that
	// name shows their calls on (see guardWatch.stats), its policies
	// matched by name when its chain is another.
	retired      map[string]*guardWatch
	retiredOrder []string // the names of retired, oldest first

	actionsDone, actionsRefused atomic.Uint64
	tuneMu                      sync.Mutex // serialises the rate and burst actions

	shutMu    sync.Mutex
	shutdowns map[weak.Pointer[http.Server]]chan struct{} // closed when the server shuts down; see stream
}

// Option configures a Dashboard.
type Option func(*Dashboard) error

// WithAuthorizer turns the admin actions on: an action is taken only when
// authorize allows its request (after the Host, cross-origin and token
// checks; see WithHosts).
// The default is no authorizer: the page is read-only and every action is
// refused with 403 Forbidden.
func WithAuthorizer(authorize func(r *http.Request) bool) Option {
	return func(d *Dashboard) error {
		if authorize == nil {
			return errors.New("dashboard: WithAuthorizer: nil function")
		}
		d.authorize = authorize
		return nil
	}
}

// WithHosts lets the admin actions be taken through the host names given
// (the Host of the request, without its port), as well as through an IP
// address or localhost, the only ones allowed by default. A page reached
// through any other name cannot act: a site whose name an attacker points
// at this machine (DNS rebinding) is same-origin to the browser, and from
// the machine's own address to an authorizer.
func WithHosts(names ...string) Option {
	return func(d *Dashboard) error {
		for i, n := range names {
			name := strings.ToLower(strings.TrimSuffix(n, "."))
			if name == "" || strings.ContainsAny(name, ":/ ") {
				return fmt.Errorf("dashboard: WithHosts: host %d, %q, is not a host name", i, n)
			}
			if d.hosts == nil {
				d.hosts = map[string]bool{}
			}
			d.hosts[name] = true
		}
		return nil
	}
}

// hostAllowed reports whether an action may come through the request's
// Host host: an IP address, localhost, or a name given to WithHosts.
func (d *Dashboard) hostAllowed(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return true
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost") || d.hosts[host]
}

// WithLogger logs the admin actions, taken and refused, to log instead of
// slog.Default().
func WithLogger(log *slog.Logger) Option {
	return func(d *Dashboard) error {
		if log == nil {
			return errors.New("dashboard: WithLogger: nil logger")
		}
		d.log = log
		return nil
	}
}

// WithSwitches shows the degradation switches given, and with an authorizer
// lets the page pin each on or off (degrade.Switch.Pin). The default is
// none.
func WithSwitches(switches ...*degrade.Switch) Option {
	return func(d *Dashboard) error {
		for i, sw := range switches {
			if sw == nil {
				return fmt.Errorf("dashboard: WithSwitches: switch %d is nil", i)
			}
		}
		d.switches = append(d.switches, switches...)
		return nil
	}
}

// WithRules shows the version of the rules in force and the result of the
// last reload, as status reports them: the version, when the last load
// ended, and why it failed (nil when it succeeded). For a rules loader,
// status returns its status's version, time and error. A change of any of
// the three shows in the event list. The default is no rules shown.
func WithRules(status func() (version string, loaded time.Time, err error)) Option {
	return func(d *Dashboard) error {
		if status == nil {
			return errors.New("dashboard: WithRules: nil function")
		}
		d.rules = status
		return nil
	}
}

// WithCPU shows the CPU usage that cpu reports, a fraction from 0 (idle)
// to 1 (all the CPU the process may use), beside each load guard
// (adaptive.Shedder), which decides by latency and reads no CPU itself. A
// started adaptive.SystemSampler's CPU method is one. It is called once
// per snapshot and load guard: it must be cheap. The default is no CPU
// shown.
func WithCPU(cpu func() float64) Option {
	return func(d *Dashboard) error {
		if cpu == nil {
			return errors.New("dashboard: WithCPU: nil function")
		}
		d.cpu = cpu
		return nil
	}
}

// New returns a Dashboard configured by opts.
func New(opts ...Option) (*Dashboard, error) {
	d := &Dashboard{log: slog.Default(), csrf: http.NewCrossOriginProtection()}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("dashboard: nil Option")
		}
		if err := o(d); err != nil {
			return nil, err
		}
	}
	d.series.init()
	if _, err := rand.Read(d.secret[:]); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	names := map[string]bool{}
	for _, sw := range d.switches {
		if names[sw.Name()] {
			return nil, fmt.Errorf("dashboard: WithSwitches: two switches named %q", sw.Name())
		}
		names[sw.Name()] = true
	}
	// Only once nothing can fail: a Dashboard refused must leave no
	// listener on the switches.
	for _, sw := range d.switches {
		sw.Subscribe(func(c sluice.StateChange) {
			d.events.add(event{Time: time.Now(), Kind: "state", Policy: c.Policy, Text: c.From + " → " + c.To})
		})
	}
	return d, nil
}

// guardWatch is what a Dashboard keeps of one Guard.
type guardWatch struct {
	g        *sluice.Guard
	name     string
	policies []sluice.Policy
	// state is the state each policy last reported through
	// sluice.StateSource, and when; nil before its first change.
	state []atomic.Pointer[stateSeen]
	// keys counts the rejections by key of the keyed limiters, by policy
	// name; nil for the others.
	keys map[string]*topKeys
	// quotas are the quota each limiter without figures of its own (not a
	// token bucket) last decided with: a Decision's Limit, Remaining and
	// Reset. A chain is short: a scan finds one sooner than a map.
	quotas []namedQuota
	unsubs []func()
	// fallbacks is the Guard's fallback count last shown, by cause.
	fallbacks []uint64
	// calls counts the calls of a Guard without policies, whose Stats
	// have no counts.
	calls atomic.Uint64

	// prev is the watch of the Guard this one's took the place of while
	// that one may still count calls; prevFinal what it counted beside
	// what this Guard carries from it, once it can count no more.
	prevMu    sync.Mutex
	prev      *guardWatch
	prevFinal *shown
	prevIdle  time.Time // see guardhook.Settled
}

// shown is what the page shows of a Guard: its Stats with the counts of
// the Guards it took the place of (their policies matched by name when a
// reload changed the chain), and its totals over all of them, which keep
// the calls of a policy a reload removed.
type shown struct {
	sluice.Stats
	// admitted counts the calls every policy admitted; rejected the
	// rejections by cause, whichever policy made them.
	admitted uint64
	rejected [len(causes)]uint64
}

// maxRetired bounds the watches a Dashboard keeps for Guards let go of,
// by name, for a successor of their name to carry their counts on.
var maxRetired = 1024

// stats returns the Stats of w's Guard, with the calls of the Guards it
// took the place of that it did not carry: a rules load that fails makes
// the Guard in force again from the ended calls of the one before, whose
// calls under way end in it, and a reload puts a Guard in force while the
// one before still serves.
func (w *guardWatch) stats() shown {
	st := shown{Stats: w.g.Stats()}
	if n := len(st.Policies); n > 0 {
		st.admitted = st.Policies[n-1].Admitted // the innermost admits only what all did
	} else {
		st.admitted = w.calls.Load() // every call, once it ended
	}
	for _, p := range st.Policies {
		for c, n := range p.Rejected {
			st.rejected[c] += n
		}
	}
	w.prevMu.Lock()
	defer w.prevMu.Unlock()
	if w.prev != nil {
		// Settled is read first: a call that ends after the read below
		// is then read again at the next view, not frozen out.
		settled := guardhook.Settled(w.prev.g, &w.prevIdle, time.Now())
		ps := w.prev.stats()
		if c, ok := guardhook.Carried(w.g).(*sluice.Stats); ok {
			// Carried from a Guard of the same chain, with its counts.
			statsmath.LeaveOut(&ps.Stats, c)
			if n := len(c.Policies); n > 0 {
				ps.admitted -= min(ps.admitted, c.Policies[n-1].Admitted)
			}
			for _, p := range c.Policies {
				for c, n := range p.Rejected {
					ps.rejected[c] -= min(ps.rejected[c], n)
				}
			}
		}
		if settled {
			w.prev, w.prevFinal = nil, &ps // it counts no more
		}
		st.add(&ps)
	} else if w.prevFinal != nil {
		st.add(w.prevFinal)
	}
	return st
}

// add adds the counts of o, shown for a Guard w's took the place of.
func (s *shown) add(o *shown) {
	statsmath.Add(&s.Stats, &o.Stats)
	s.admitted += o.admitted
	for c, n := range o.rejected {
		s.rejected[c] += n
	}
}

// counted reports whether w's Stats, with those of the Guards before it,
// count any call.
func (w *guardWatch) counted() bool {
	st := w.stats()
	if st.admitted > 0 {
		return true
	}
	for _, p := range st.Policies {
		if p.Admitted > 0 || p.ShadowRejected > 0 {
			return true
		}
	}
	for _, n := range st.rejected {
		if n > 0 {
			return true
		}
	}
	return false
}

// Attach implements sluice.Observer: New of a Guard given d calls it. It
// refuses a Guard without a name (sluice.WithName) and one whose name a
// Guard shown by d has already.
func (d *Dashboard) Attach(g *sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	name := g.Name()
	if name == "" {
		return nil, nil, errors.New("dashboard: the Guard has no name: give it one with sluice.WithName")
	}
	w := &guardWatch{g: g, name: name, policies: g.Policies()}
	w.state = make([]atomic.Pointer[stateSeen], len(w.policies))
	// A call's event names its policy, not its place in the chain: the
	// quota and the keys of policies that share a name are not told apart,
	// and not shown.
	named := map[string]int{}
	for _, p := range w.policies {
		named[p.Name()]++
	}
	for i, p := range w.policies {
		pname := p.Name()
		if _, ok := p.(bucket); !ok && named[pname] == 1 {
			w.quotas = append(w.quotas, namedQuota{pname, &quotaSeen{}})
		}
		if _, ok := p.(*ratelimit.Keyed); ok && named[pname] == 1 {
			// By the request's key (sluice.KeyFrom), as a Keyed limits:
			// a breaker group's members are keyed otherwise.
			if w.keys == nil {
				w.keys = map[string]*topKeys{}
			}
			w.keys[pname] = &topKeys{}
		}
		if src, ok := p.(sluice.StateSource); ok {
			w.unsubs = append(w.unsubs, src.Subscribe(func(c sluice.StateChange) {
				now := time.Now()
				if c.Policy == pname { // not a breaker group's member
					w.state[i].Store(&stateSeen{c.To, now})
				}
				d.events.add(event{Time: now, Kind: "state", Guard: name, Policy: c.Policy, Text: c.From + " → " + c.To})
			}))
		}
	}
	d.mu.Lock()
	i, found := slices.BinarySearchFunc(d.guards, name, func(w *guardWatch, name string) int {
		return cmp.Compare(w.name, name)
	})
	if found {
		d.mu.Unlock()
		w.unsubscribe()
		return nil, nil, fmt.Errorf("dashboard: a Guard named %q is shown already", name)
	}
	d.guards = slices.Insert(d.guards, i, w)
	if r := d.retired[name]; r != nil {
		delete(d.retired, name)
		d.retiredOrder = slices.DeleteFunc(d.retiredOrder, func(n string) bool { return n == name })
		w.prev = r
		// Its fallbacks shown already are not shown again.
		w.fallbacks = make([]uint64, len(sluice.Stats{}.Fallbacks))
		copy(w.fallbacks, r.fallbacks)
	}
	d.mu.Unlock()

	var once sync.Once
	detach := func() {
		once.Do(func() {
			w.unsubscribe()
			d.mu.Lock()
			d.guards = slices.DeleteFunc(d.guards, func(x *guardWatch) bool { return x == w })
			// Kept while its Guard still serves (a rules reload lets its
			// observers go before putting its successor in force; a Guard
			// its user closed is retired first, and kept by none). One
			// that never counted a call, itself or through the ones
			// before it (made by a rules load that then failed), leaves
			// the one before it in place, as does one New refused while
			// the one before it may count calls (one it took the place
			// of once that was settled stays, and, settled itself, is
			// let go of by the next).
			keep := w
			if guardhook.Refused(g) {
				w.prevMu.Lock()
				if w.prev != nil {
					keep = w.prev
				}
				w.prevMu.Unlock()
			}
			if keep != w || (!guardhook.Retired(g) && w.counted()) {
				if d.retired == nil {
					d.retired = map[string]*guardWatch{}
				}
				if d.retired[name] == nil {
					d.retiredOrder = append(d.retiredOrder, name)
				}
				d.retired[name] = keep
				if len(d.retiredOrder) > maxRetired {
					// Names that come and go (a guard per tenant, removed
					// by reloads) must not keep their Guards for good.
					delete(d.retired, d.retiredOrder[0])
					d.retiredOrder = slices.Delete(d.retiredOrder, 0, 1)
				}
			}
			d.redis = slices.DeleteFunc(d.redis, func(r *redisSeen) bool { return !d.holdsLocked(r.limiter) })
			d.mu.Unlock()
		})
	}
	observe := func(ctx context.Context, e sluice.CallEvent) {
		d.series.add(&e)
		if e.Decision.Limit >= 0 {
			if q := w.quota(e.Decision.Policy); q != nil {
				q.store(&e.Decision)
			}
		}
		if len(w.policies) == 0 {
			w.calls.Add(1)
		}
		if !e.Admitted && w.keys != nil {
			if t := w.keys[e.Policy]; t != nil {
				if key, ok := sluice.KeyFrom(ctx); ok {
					t.add(key)
				}
			}
		}
	}
	return observe, detach, nil
}

type namedQuota struct {
	name string
	q    *quotaSeen
}

// quota returns the quota kept for the policy named name; nil for none.
func (w *guardWatch) quota(name string) *quotaSeen {
	for _, nq := range w.quotas {
		if nq.name == name {
			return nq.q
		}
	}
	return nil
}

// quotaSeen is the quota a policy last decided with; limit is -1 before
// any.
type quotaSeen struct {
	limit, remaining, reset atomic.Int64
	at                      atomic.Int64 // when it was decided, in Unix nanoseconds
}

func (q *quotaSeen) store(d *sluice.Decision) {
	q.limit.Store(d.Limit + 1) // 0: none seen
	q.remaining.Store(d.Remaining)
	q.reset.Store(int64(d.Reset))
	q.at.Store(time.Now().UnixNano())
}

// stateSeen is a policy's state as it last reported it, and when.
type stateSeen struct {
	state string
	since time.Time
}

func (w *guardWatch) unsubscribe() {
	for _, u := range w.unsubs {
		u()
	}
	w.unsubs = nil
}

// guard returns the Guard named name.
func (d *Dashboard) guard(name string) *guardWatch {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range d.guards {
		if w.name == name {
			return w
		}
	}
	return nil
}
