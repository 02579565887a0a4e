package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/internal/isnil"
	"github.com/sluice-go/sluice/internal/keyhook"
	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/ratelimit"
)

// Loader holds the rules of one file and the Guards made from them, and
// loads the file again on Reload or, once Watch has started, when it
// changes. A file that fails to load changes nothing: the rules in force
// stay. A Loader is safe for concurrent use; Close stops it.
type Loader struct {
	path     string
	b        builder
	log      *slog.Logger
	onReload []func(Status)
	guardOpt func(guard string) []sluice.Option

	mu       sync.Mutex // serialises loads
	cur      atomic.Pointer[state]
	status   atomic.Pointer[Status]
	failures uint64
	// lastFail is the last load's failure, nil after one that did not
	// fail; under mu.
	lastFail *failure
	closed   bool
	w        *watcher // nil until Watch
	// adapters are the builds of the middleware made with HTTP and Echo,
	// which a load runs on its new rules before they come into force: a
	// table an adapter refuses is a load that fails. Under adaptersMu (HTTP
	// may be called by an OnReload function, under mu).
	adaptersMu sync.Mutex
	adapters   []func(*state) error
}

// Version identifies the rules in force.
type Version struct {
	// N counts the rules loaded since New, the first being 1: a reload that
	// changes the file's content adds one.
	N uint64
	// Hash is the SHA-256 of the file's content, in hex.
	Hash string
}

// Status is what the last load of the file did.
type Status struct {
	// Version is that of the rules in force.
	Version Version
	// At is when the last load ended, whether it loaded new rules, found the
	// file unchanged, or failed.
	At time.Time
	// Err is why the last load failed: every error of the file, each with
	// its line, joined; a file that could not be read. It is nil when the
	// last load succeeded or found the file unchanged.
	Err error
	// Changes says what the rules in force changed from the ones before
	// them, a line per change: "policy api: rate 100/1s → 10/1s (in place)".
	Changes []string
	// Failures counts the loads that failed since New.
	Failures uint64
}

// Option configures a Loader.
type Option func(*Loader) error

// WithRedis gives the Loader the Redis client of the policies the file
// keeps in Redis (store: redis). Without it, such a policy is an error.
func WithRedis(c redis.UniversalClient) Option {
	return func(l *Loader) error {
		if isnil.Of(c) {
			return errors.New("rules: WithRedis: nil client")
		}
		l.b.redis = c
		return nil
	}
}

// WithLogger makes the Loader log its loads to lg: Info for rules loaded,
// Error for a file that failed. Default: slog.Default().
func WithLogger(lg *slog.Logger) Option {
	return func(l *Loader) error {
		if lg == nil {
			return errors.New("rules: WithLogger: nil logger")
		}
		l.log = lg
		return nil
	}
}

// WithGuardOptions gives every Guard the Loader makes the options fn
// returns for the guard's name in the file: an observer (sluice.WithObserver)
// to count its decisions, shadow rejections among them, say. A Guard is
// named after its guard (sluice.WithName) unless the options name it
// otherwise. When a reload rebuilds a guard, its old Guard lets its
// observers go, as sluice.Guard.Close does, just before its successor is
// made; the policies the options gave it are closed once the load stands,
// unless the successor has them too. When the options refuse a Guard (an
// observer's Attach fails), the load fails and undoes what it changed: the
// Guards it let go are made again from their options, with the shadow modes they
// had and the counts of their calls that ended (those under way end in the
// closed Guard, whose observers hear them), and no policy kept has taken new numbers yet (they are
// set once every Guard is made). Default: no options.
func WithGuardOptions(fn func(guard string) []sluice.Option) Option {
	return func(l *Loader) error {
		if fn == nil {
			return errors.New("rules: WithGuardOptions: nil function")
		}
		l.guardOpt = fn
		return nil
	}
}

// OnReload registers fn, called after every load but the first and those
// that find the file unchanged, with its Status. Loads are serialised, and
// fn runs within one: it must not call Reload or Close, which wait for it.
func OnReload(fn func(Status)) Option {
	return func(l *Loader) error {
		if fn == nil {
			return errors.New("rules: OnReload: nil function")
		}
		l.onReload = append(l.onReload, fn)
		return nil
	}
}

// New loads the rules file at path (YAML, or JSON when its name ends in
// .json; see the package doc for the schema). It returns every error the
// file holds, each with its line, when it cannot be loaded. No goroutine
// runs until Watch.
func New(path string, opts ...Option) (*Loader, error) {
	l := &Loader{path: path, log: slog.Default()}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("rules: New: option %d is nil", i)
		}
		if err := o(l); err != nil {
			return nil, err
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.load(data, sha256.Sum256(data)); err != nil {
		return nil, err
	}
	return l, nil
}

// Reload reads the file again and, when its content changed, loads it: the
// new rules take the place of the old ones at once, or, when the file fails
// to load, the old ones stay in force and Reload returns why. A file that
// is missing keeps the rules in force too. Call it on SIGHUP, say, or from
// an admin endpoint; Watch calls it when the file changes.
func (l *Loader) Reload() error { return l.reload(false) }

// failure is a load's failure: the file's content that failed to load, or
// the error reading it, and what was reported of it.
type failure struct {
	sum  [sha256.Size]byte // the content's SHA-256; zero for a read error
	read string            // the read error's text; "" for content
	err  error
}

// reload is Reload; for the watcher (watched), a load that fails as the
// last one did (the same content, the same read error) fails again
// unreported: an event of the file's directory that left it as it was
// (another file written there) is no news.
func (l *Loader) reload(watched bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("rules: Reload after Close")
	}
	data, err := os.ReadFile(l.path)
	if err != nil {
		if f := l.lastFail; watched && f != nil && f.read == err.Error() {
			return f.err
		}
		read := err.Error()
		err = fmt.Errorf("rules: %w; the rules of version %d stay in force", err, l.cur.Load().version.N)
		l.lastFail = &failure{read: read, err: err}
		l.failed(err)
		return err
	}
	sum := sha256.Sum256(data)
	if f := l.lastFail; watched && f != nil && f.read == "" && f.sum == sum {
		return f.err
	}
	recovered := l.status.Load().Err != nil // told of a failure: tell of its end
	changed, err := l.load(data, sum)
	if err != nil {
		l.lastFail = &failure{sum: sum, err: err}
		l.failed(err)
		return err
	}
	l.lastFail = nil
	if changed || recovered {
		l.notify()
	}
	return nil
}

func (l *Loader) failed(err error) {
	l.failures++
	st := *l.status.Load()
	st.At, st.Err, st.Failures = time.Now(), err, l.failures
	l.status.Store(&st)
	l.log.Error("sluice rules: the file failed to load; the rules in force stay", "file", l.path,
		"version", st.Version.N, "error", err)
	l.notify()
}

func (l *Loader) notify() {
	st := *l.status.Load()
	for _, fn := range l.onReload {
		fn(st)
	}
}

// Status returns what the last load did.
func (l *Loader) Status() Status { return *l.status.Load() }

// Version returns the version of the rules in force.
func (l *Loader) Version() Version { return l.cur.Load().version }

// Guard returns the Guard of the rules in force named name, for calls made
// with sluice.Guard.Do or sluice.Execute; false when no guard has that
// name. A reload that changes the guard makes a new Guard, which a later
// call of Guard returns; the adapters of the Loader (HTTP, Echo) follow it
// themselves. Ask for the Guard at each call: the observers (metrics, the
// dashboard) count the calls of one a reload replaced or removed for a
// minute after its last call ended, not for good.
func (l *Loader) Guard(name string) (*sluice.Guard, bool) {
	g, ok := l.cur.Load().guards[name]
	return g, ok
}

// Close stops the watcher, if any, and closes the Guards of the rules in
// force (sluice.Guard.Close). Closing twice is harmless.
func (l *Loader) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	w := l.w
	l.mu.Unlock()
	if w != nil {
		w.stop()
	}
	var errs []error
	if st := l.cur.Load(); st != nil {
		for _, g := range st.guards {
			errs = append(errs, g.Close())
		}
	}
	return errors.Join(errs...)
}

// load loads data, whose SHA-256 is sum, under l.mu; it reports whether the
// rules changed.
func (l *Loader) load(data []byte, sum [sha256.Size]byte) (bool, error) {
	hash := hex.EncodeToString(sum[:])
	old := l.cur.Load()
	if old != nil && old.version.Hash == hash {
		st := *l.status.Load()
		st.At, st.Err = time.Now(), nil
		l.status.Store(&st)
		return false, nil
	}
	s, err := parse(l.path, data)
	if err != nil {
		return false, err
	}
	next, changes, err := l.build(old, s)
	if err != nil {
		if next != nil && next != old {
			l.cur.Store(next) // the rules in force, their Guards made again
			retireReplaced(old, next)
		}
		return false, err
	}
	next.version = Version{N: 1, Hash: hash}
	if old != nil {
		next.version.N = old.version.N + 1
	}
	l.cur.Store(next)
	retireReplaced(old, next)
	st := &Status{Version: next.version, At: time.Now(), Changes: changes, Failures: l.failures}
	l.status.Store(st)
	l.log.Info("sluice rules: loaded", "file", l.path, "version", next.version.N,
		"hash", hash[:12], "changes", len(changes))
	return true, nil
}

// build makes the state of s, keeping what it can of old (nil for the
// first load): a policy whose spec is unchanged is kept, one whose numbers
// changed takes them in place when its kind can, and the others are made
// anew. Nothing of old changes until every part of s has been checked.
// When a Guard's options refuse it after that, build undoes what it
// changed, and returns with its error the state to keep in force: old, or
// a copy of old whose rebuilt Guards were made again; nil when s failed
// its checks.
func (l *Loader) build(old *state, s *spec) (*state, []string, error) {
	type change struct {
		prev, made *built
	}
	var (
		errs    []error
		made    []*built // new policies, closed if the load fails
		changed []change // policies of old with new numbers
		out     []string
	)
	next := &state{spec: s, policies: map[string]*built{}, guards: map[string]*sluice.Guard{}, sigs: map[string]string{}, opts: map[string][]sluice.Option{}}
	for _, ps := range s.policies {
		var prev *built
		if old != nil {
			prev = old.policies[ps.name]
		}
		if prev != nil && prev.spec.numbersOnly() == ps.numbersOnly() {
			next.policies[ps.name] = prev.kept(ps)
			continue
		}
		b, err := l.b.newPolicy(ps) // checks the numbers as the constructor does
		if err != nil {
			errs = append(errs, where(l.path, ps.at, "policy "+ps.name, err))
			continue
		}
		made = append(made, b)
		next.policies[ps.name] = b
		switch {
		case prev == nil:
			out = append(out, fmt.Sprintf("policy %s: new %s", ps.name, ps.kind))
		case prev.spec.sameShape(ps):
			changed = append(changed, change{prev, b})
		default:
			out = append(out, fmt.Sprintf("policy %s: rebuilt: %s", ps.name, diff(prev.spec, ps)))
		}
	}
	keys, fbs := l.guardParts(s, &errs)
	if len(errs) > 0 {
		for _, b := range made {
			closePolicy(b.p)
		}
		return nil, nil, errors.Join(errs...)
	}
	// The file is sound: the policies of old that can take their new
	// numbers in place will, once the Guards are made (a Guard's options
	// may refuse it, and numbers set back do not bring back the counts a
	// new window dropped); the others give way to new ones.
	var pending []change
	for _, c := range changed {
		ps := c.made.spec
		if err := l.b.canUpdate(c.prev, ps); err != nil {
			out = append(out, fmt.Sprintf("policy %s: rebuilt: %s (%v)", ps.name, diff(c.prev.spec, ps), err))
			continue
		}
		pending = append(pending, c)
		next.policies[ps.name] = c.prev.kept(ps)
		out = append(out, fmt.Sprintf("policy %s: %s (in place)", ps.name, diff(c.prev.spec, ps)))
	}
	// What a load that fails sets back: the numbers in force before it,
	// which are the old file's but for a rate and burst set by hand since
	// (the dashboard's).
	inForce := make([]func() error, len(pending))
	setBack := func(n int) {
		for i, c := range pending[:n] {
			var err error
			if inForce[i] != nil {
				err = inForce[i]()
			} else {
				err = update(c.prev.kept(c.made.spec), c.prev.spec)
			}
			if err != nil {
				l.log.Error("sluice rules: setting a policy's numbers back", "policy", c.prev.spec.name, "error", err)
			}
		}
	}
	apply := func() error {
		for i, c := range pending {
			if t, ok := c.prev.p.(retunable); ok {
				r, b := t.Rate(), t.Burst()
				to := c.made.spec
				inForce[i] = func() error {
					// A number set by hand since this load set its own
					// (the dashboard shows the limiter meanwhile) stays.
					nr, nb := t.Rate(), t.Burst()
					if nr == to.rate {
						nr = r
					}
					if nb == to.burst {
						nb = b
					}
					return t.SetLimit(nr, nb)
				}
			}
			if err := update(c.prev, c.made.spec); err != nil {
				setBack(i)
				return where(l.path, c.made.spec.at, "policy "+c.made.spec.name, err)
			}
		}
		return nil
	}
	keep, err := l.assemble(old, next, keys, fbs, &out, apply, func() { setBack(len(pending)) })
	if err != nil {
		// A Guard's options refused it (an observer, say), or a number
		// refused in place: the new policies go.
		for _, b := range made {
			closePolicy(b.p)
		}
		return keep, nil, err
	}
	for _, c := range pending {
		closePolicy(c.made.p)
	}
	// The policies a program's options gave a Guard made anew (a Keyed
	// with a janitor, say) that no Guard of the new rules has.
	if len(next.rebuilt) > 0 {
		var inUse []sluice.Policy
		for _, g := range next.guards {
			inUse = append(inUse, g.Policies()...)
		}
		for _, og := range next.rebuilt {
			for _, p := range og.Policies() {
				if !slices.Contains(inUse, p) && !ruled(old, p) {
					closePolicy(p)
				}
			}
		}
	}
	next.rebuilt = nil
	if old != nil {
		var inUse []sluice.Policy
		for _, g := range next.guards {
			inUse = append(inUse, g.Policies()...)
		}
		for name, g := range old.guards {
			if next.guards[name] == nil {
				// Let go of, not closed: a request that found it in force
				// may still begin a call on it, which its observers count
				// on for a while (it is retired once the new rules are in
				// force). The policies only it held close, as Close would
				// close them; the rules' own close below.
				guardhook.Detach(g)
				for _, p := range g.Policies() {
					if !slices.Contains(inUse, p) && !ruled(old, p) && !ruled(next, p) {
						closePolicy(p)
					}
				}
				out = append(out, "guard "+name+": removed")
			}
		}
		for name, b := range old.policies {
			if nb := next.policies[name]; nb == nil || nb.p != b.p {
				if nb != nil {
					carry(b.p, nb.p)
				}
				closePolicy(b.p)
				if nb == nil {
					out = append(out, fmt.Sprintf("policy %s: removed", name))
				}
			}
		}
		out = append(out, routeChanges(old.spec, s)...)
	}
	return next, out, nil
}

// guardParts makes each guard's key function and fallbacks, which may
// fail on what the parser cannot check (a proxy's prefix), so that they
// are checked before any policy changes.
func (l *Loader) guardParts(s *spec, errs *[]error) (map[string]middleware.KeyFunc, map[string]fallbacks) {
	keys := map[string]middleware.KeyFunc{}
	fbs := map[string]fallbacks{}
	for _, gs := range s.guards {
		fn, err := keyFunc(gs.key)
		if err != nil {
			*errs = append(*errs, where(l.path, gs.at, "guard "+gs.name+": key", err))
		}
		keys[gs.name] = fn
		fb, desc, err := fallbacksOf(s, gs.name)
		if err != nil {
			*errs = append(*errs, where(l.path, gs.at, "guard "+gs.name+": fallbacks", err))
		}
		fbs[gs.name] = fallbacks{fb, desc}
	}
	return keys, fbs
}

// retunable is a limiter whose rate and burst may be set while it serves,
// by a file's reload or by hand.
type retunable interface {
	Rate() ratelimit.Rate
	Burst() int64
	SetLimit(r ratelimit.Rate, burst int64) error
}

// fallbacks are a guard's fallbacks and their description.
type fallbacks struct {
	fb   sluice.Fallback
	desc string
}

// assemble makes the Guards, the route table and the Keyer of next from
// its policies, keeping each Guard of old whose parts are the same, and
// setting its shadow modes to the file's. Once the Guards and the Keyer
// are made, it calls apply to set the new numbers of the policies kept,
// and setBack should a later step fail. When a Guard's options refuse it,
// assemble undoes what it did (undo) and returns the state to keep in
// force.
func (l *Loader) assemble(old, next *state, keys map[string]middleware.KeyFunc, fbs map[string]fallbacks, out *[]string, apply func() error, setBack func()) (*state, error) {
	s := next.spec
	type kept struct {
		g       *sluice.Guard
		gs, was *guardSpec
		ps      []sluice.Policy
	}
	type modes struct {
		g     *sluice.Guard
		all   bool
		names []string
	}
	var (
		made   []*sluice.Guard // the Guards made for next
		keep   []kept          // Guards of old kept: their shadow modes are set last
		closed []string        // Guards of old closed for a successor
		// set are the shadow modes the load gave each Guard it made in
		// the place of one of old, by name: one changed by hand since
		// (the dashboard shows the new Guard while the load runs) is
		// changed so on the Guard made again should the load fail.
		set = map[string]modes{}
	)
	applied := false // the numbers set in place
	undo := func(err error) (*state, error) {
		if applied {
			setBack()
		}
		// The Guards made let their observers go. Their policies are the
		// rules' (build closes the new ones) or the options': those the
		// rules kept in force hold stay open, the others are closed.
		// The Guards made let their observers go first: the Guards made
		// again take their names.
		for _, g := range made {
			guardhook.Detach(g)
			guardhook.Retire(g) // it never served
		}
		st := l.remake(old, closed)
		if st != nil {
			for name, m := range set {
				if g := st.guards[name]; g != old.guards[name] {
					byHand(m.g, m.all, m.names, g)
				}
			}
		}
		var inUse []sluice.Policy
		if st != nil { // nil for a first load
			for _, g := range st.guards {
				inUse = append(inUse, g.Policies()...)
			}
		}
		for _, g := range made {
			for _, p := range g.Policies() {
				if !slices.Contains(inUse, p) && !ruled(next, p) && !ruled(old, p) {
					closePolicy(p)
				}
			}
		}
		return st, err
	}
	for _, gs := range s.guards {
		ps := make([]sluice.Policy, len(gs.policies))
		for i, p := range gs.policies {
			ps[i] = next.policies[p.name].p
		}
		sig := signature(gs, ps, fbs[gs.name].desc)
		next.sigs[gs.name] = sig
		if old != nil && old.sigs[gs.name] == sig {
			g := old.guards[gs.name]
			next.guards[gs.name], next.opts[gs.name] = g, old.opts[gs.name]
			keep = append(keep, kept{g, gs, old.spec.byName[gs.name], ps})
			continue
		}
		opts := []sluice.Option{sluice.WithName(gs.name), sluice.With(ps...)}
		if l.guardOpt != nil {
			opts = append(opts, l.guardOpt(gs.name)...)
		}
		if gs.timeout > 0 {
			opts = append(opts, sluice.WithTimeout(gs.timeout))
		}
		if fb := fbs[gs.name].fb; fb != nil {
			opts = append(opts, sluice.WithFallback(fb))
		}
		if gs.shadow {
			opts = append(opts, sluice.WithShadow(""))
		}
		for i, p := range gs.policies {
			if p.shadow {
				opts = append(opts, sluice.WithShadow(ps[i].Name()))
			}
		}
		if old != nil && old.guards[gs.name] != nil {
			// Its observers let go of it, for its successor of the same
			// name; it serves on until the new rules are in force. Its
			// policies are not closed: the successor may keep some (a
			// policy given by WithGuardOptions with a janitor among them),
			// and those it does not are closed once the load stands.
			guardhook.Detach(old.guards[gs.name])
			closed = append(closed, gs.name)
			if next.rebuilt == nil {
				next.rebuilt = map[string]*sluice.Guard{}
			}
			next.rebuilt[gs.name] = old.guards[gs.name]
			line := "guard " + gs.name + ": rebuilt"
			if was := old.spec.byName[gs.name]; was != nil && was.timeout != gs.timeout {
				line += fmt.Sprintf(" (timeout %v → %v)", was.timeout, gs.timeout)
			}
			*out = append(*out, line)
		}
		g, err := sluice.New(opts...)
		if err != nil {
			return undo(where(l.path, gs.at, "guard "+gs.name, err))
		}
		made = append(made, g)
		if old != nil && old.guards[gs.name] != nil {
			handShadows(old.guards[gs.name], old.spec.byName[gs.name], g, gs, ps, out)
			all, names := guardhook.Shadows(g)
			set[gs.name] = modes{g, all, names}
		}
		next.guards[gs.name], next.opts[gs.name] = g, opts
	}
	if old != nil {
		// What the per-client limits count by is no part of a Guard: said
		// apart.
		for _, gs := range s.guards {
			if was := old.spec.byName[gs.name]; was != nil && keyDesc(was.key) != keyDesc(gs.key) {
				*out = append(*out, "guard "+gs.name+": key "+keyDesc(was.key)+" → "+keyDesc(gs.key))
			}
		}
	}
	byRoute := map[string]middleware.KeyFunc{}
	keyed := false
	keyOf := func(guard string) middleware.KeyFunc {
		if fn := keys[guard]; fn != nil {
			keyed = true
			return fn
		}
		return noKey
	}
	for _, r := range s.routes {
		byRoute[r.pattern] = keyOf(r.guard)
	}
	var other middleware.KeyFunc
	if s.def != "" {
		other = keyOf(s.def)
	}
	if keyed {
		missing := middleware.SharedKey(sharedKey)
		for _, gs := range s.guards {
			if gs.key != nil && gs.key.reject {
				missing = middleware.RejectMissingKey()
			}
		}
		k, err := middleware.NewKeyer(missing, middleware.KeyPerRoute(byRoute, other))
		if err != nil {
			return undo(fmt.Errorf("%s: keys: %w", l.path, err))
		}
		// Its shared guards' key functions give their keyless requests
		// the shared key themselves: it is no client's (a stale copy of
		// such a request is kept by its connection).
		keyhook.NoClient(k, sharedKey)
		next.keyer = k
	}
	// The Guards are made: the policies kept take their new numbers, which
	// the route table reads (a window, for the RateLimit-Policy field).
	if err := apply(); err != nil {
		return undo(err)
	}
	applied = true
	rs, err := routesOf(s, next.guards)
	if err != nil {
		return undo(fmt.Errorf("%s: routes: %w", l.path, err))
	}
	next.routes = rs
	// The middleware made with HTTP and Echo serve the new table from
	// their next request: one that an adapter refuses (a Guard whose
	// program-given fallbacks answer no http.Handler, say) would be served
	// by none, while the numbers set in place above are already in force.
	l.adaptersMu.Lock()
	adapters := slices.Clone(l.adapters)
	l.adaptersMu.Unlock()
	if len(adapters) > 0 {
		// What the adapters would refuse of a routed Guard, said at the
		// route that put it behind them.
		for _, r := range s.routes {
			if err := servable(next.guards[r.guard]); err != nil {
				return undo(where(l.path, r.at, "route "+r.pattern+": guard "+r.guard, err))
			}
		}
		if err := servable(next.guards[s.def]); err != nil {
			return undo(where(l.path, s.defAt, "default: guard "+s.def, err))
		}
	}
	for _, build := range adapters {
		if err := build(next); err != nil {
			return undo(fmt.Errorf("%s: the middleware refuses the rules: %w", l.path, err))
		}
	}
	// Nothing can fail past here but a shadow mode the parser let by: the
	// kept Guards take the file's modes now, and are set back if one
	// fails, so that a failed load leaves their modes as they were.
	for i, k := range keep {
		if err := setShadows(k.g, k.gs, k.ps, k.was, out); err != nil {
			for _, b := range keep[:i] {
				_ = setShadows(b.g, b.was, b.ps, b.gs, new([]string))
			}
			return undo(where(l.path, k.gs.at, "guard "+k.gs.name, err))
		}
	}
	return nil, nil
}

// retireReplaced marks the Guards of old that next, now in force, has
// replaced as serving no new call: their observers may settle their counts.
func retireReplaced(old, next *state) {
	if old == nil {
		return
	}
	for name, g := range old.guards {
		if next.guards[name] != g {
			guardhook.Retire(g)
		}
	}
}

// routesOf returns the route table of s, whose guards are these.
func routesOf(s *spec, guards map[string]*sluice.Guard) (*middleware.Routes, error) {
	var ropts []middleware.RoutesOption
	for _, r := range s.routes {
		ropts = append(ropts, middleware.RouteTo(r.pattern, guards[r.guard]))
	}
	if s.def != "" {
		ropts = append(ropts, middleware.DefaultRoute(guards[s.def]))
	}
	return middleware.NewRoutes(ropts...)
}

// remake returns the state to keep in force when a load fails after it
// closed the Guards of old named closed: a copy of old in which each is
// made again from its options, so that its observers hear it again. A
// Guard that cannot be made again is logged, and the closed one serves on.
func (l *Loader) remake(old *state, closed []string) *state {
	if len(closed) == 0 {
		return old
	}
	st := *old
	st.guards = maps.Clone(old.guards)
	for _, name := range closed {
		g, err := sluice.New(old.opts[name]...)
		if err != nil {
			l.log.Error("sluice rules: making a guard of the rules in force again", "guard", name, "error", err)
			continue
		}
		// The modes in force (those a reload set in place since the
		// Guard was made, those set by hand: SetShadow) and its counts:
		// a load that fails changes nothing.
		guardhook.Carry(old.guards[name], g)
		st.guards[name] = g
	}
	rs, err := routesOf(old.spec, st.guards)
	if err != nil { // it was made once: it cannot fail
		l.log.Error("sluice rules: the route table of the rules in force", "error", err)
		return old
	}
	st.routes = rs
	return &st
}

// handShadows gives g, made for gs (its policies ps) in the place of prev,
// made for was, the shadow modes set on prev by hand (SetShadow: the
// dashboard) where the file's mode did not change: the guard's, and its
// policies' by name.
func handShadows(prev *sluice.Guard, was *guardSpec, g *sluice.Guard, gs *guardSpec, ps []sluice.Policy, out *[]string) {
	if was == nil {
		return
	}
	all, names := guardhook.Shadows(prev)
	if all != was.shadow && gs.shadow == was.shadow && g.SetShadow("", all) == nil {
		*out = append(*out, "guard "+gs.name+": "+modeName(all)+" (set by hand, kept)")
	}
	for i, p := range gs.policies {
		for _, wp := range was.policies {
			if wp.name != p.name {
				continue
			}
			name := ps[i].Name()
			hand := slices.Contains(names, name)
			if hand != wp.shadow && p.shadow == wp.shadow && g.SetShadow(name, hand) == nil {
				*out = append(*out, "policy "+p.name+": "+modeName(hand)+" (set by hand, kept)")
			}
		}
	}
}

// byHand gives to, made again in the place of g when a load failed, the
// shadow modes changed on g by hand since the load set them (all and
// names): the Guard in force does what the operator was told it does.
func byHand(g *sluice.Guard, all bool, names []string, to *sluice.Guard) {
	nowAll, nowNames := guardhook.Shadows(g)
	if nowAll != all {
		_ = to.SetShadow("", nowAll)
	}
	for _, n := range nowNames {
		if !slices.Contains(names, n) {
			_ = to.SetShadow(n, true)
		}
	}
	for _, n := range names {
		if !slices.Contains(nowNames, n) {
			_ = to.SetShadow(n, false)
		}
	}
}

// modeName names a shadow mode in Status.Changes.
func modeName(shadow bool) string {
	if shadow {
		return "shadow"
	}
	return "enforcing"
}

// setShadows sets the shadow modes of g, kept from the rules before (was),
// to those gs declares; ps are its policies.
func setShadows(g *sluice.Guard, gs *guardSpec, ps []sluice.Policy, was *guardSpec, out *[]string) error {
	if gs.shadow != was.shadow {
		if err := g.SetShadow("", gs.shadow); err != nil {
			return err
		}
		*out = append(*out, "guard "+gs.name+": "+modeName(gs.shadow))
	}
	for i, p := range gs.policies {
		if p.shadow != was.policies[i].shadow {
			if err := g.SetShadow(ps[i].Name(), p.shadow); err != nil {
				return err
			}
			*out = append(*out, "policy "+p.name+": "+modeName(p.shadow))
		}
	}
	return nil
}

// diff says which numbers differ between from and to.
func diff(from, to *policySpec) string {
	if from.kind != to.kind {
		return "kind " + from.kind + " → " + to.kind
	}
	f, t := reflect.ValueOf(*from), reflect.ValueOf(*to)
	var out string
	for i := range f.NumField() {
		name := f.Type().Field(i).Tag.Get("rules")
		if name == "" || name == "shadow" {
			continue
		}
		a, b := show(f.Field(i)), show(t.Field(i))
		if a != b {
			if out != "" {
				out += ", "
			}
			out += fmt.Sprintf("%s %s → %s", name, a, b)
		}
	}
	if out == "" {
		return "unchanged"
	}
	return out
}

// show formats a field of a policySpec.
func show(v reflect.Value) string {
	switch v.Type() {
	case reflect.TypeFor[ratelimit.Rate]():
		return ratelimit.Rate{Count: v.Field(0).Int(), Period: time.Duration(v.Field(1).Int())}.String()
	case reflect.TypeFor[time.Duration]():
		return time.Duration(v.Int()).String()
	}
	return fmt.Sprint(v)
}

// routeChanges says which routes moved to another guard, appeared or went.
func routeChanges(from, to *spec) []string {
	var out []string
	was := map[string]string{}
	for _, r := range from.routes {
		was[r.pattern] = r.guard
	}
	for _, r := range to.routes {
		switch g, ok := was[r.pattern]; {
		case !ok:
			out = append(out, fmt.Sprintf("route %s: new, guard %s", r.pattern, r.guard))
		case g != r.guard:
			out = append(out, fmt.Sprintf("route %s: guard %s → %s", r.pattern, g, r.guard))
		}
		delete(was, r.pattern)
	}
	for _, p := range slices.Sorted(maps.Keys(was)) {
		out = append(out, "route "+p+": removed")
	}
	if from.def != to.def {
		out = append(out, fmt.Sprintf("default route: guard %q → %q", from.def, to.def))
	}
	return out
}

// keyDesc describes k, a guard's key, for the changes a reload reports.
func keyDesc(k *keySpec) string {
	if k == nil {
		return "none"
	}
	var d string
	switch {
	case k.header != "":
		d = "header " + k.header
	case k.cookie != "":
		d = "cookie " + k.cookie
	default:
		d = "ip"
		if len(k.proxies) > 0 {
			d += " behind " + strings.Join(k.proxies, ",") + " (" + strings.Join(k.proxyHeaders, ",") + ")"
		}
		if k.v4 > 0 || k.v6 > 0 {
			d += fmt.Sprintf(" /%d /%d", k.v4, k.v6)
		}
	}
	if k.reject {
		d += ", missing rejected"
	}
	return d
}
