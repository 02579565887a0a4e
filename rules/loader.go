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
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
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

	mu       sync.Mutex // serialises loads
	cur      atomic.Pointer[state]
	status   atomic.Pointer[Status]
	failures uint64
	closed   bool
	w        *watcher // nil until Watch
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
	// Version is the rules' in force.
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
		if c == nil {
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

// OnReload registers fn, called after every load but the first and those
// that find the file unchanged, with its Status. Loads are serialised, and
// fn runs within one: it must not call Reload.
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
	for _, o := range opts {
		if o == nil {
			continue
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
	if _, err := l.load(data); err != nil {
		return nil, err
	}
	return l, nil
}

// Reload reads the file again and, when its content changed, loads it: the
// new rules take the place of the old ones at once, or, when the file fails
// to load, the old ones stay in force and Reload returns why. A file that
// is missing keeps the rules in force too. Call it on SIGHUP, say, or from
// an admin endpoint; Watch calls it when the file changes.
func (l *Loader) Reload() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("rules: Reload after Close")
	}
	data, err := os.ReadFile(l.path)
	if err != nil {
		err = fmt.Errorf("rules: %w; the rules of version %d stay in force", err, l.cur.Load().version.N)
		l.failed(err)
		return err
	}
	changed, err := l.load(data)
	if err != nil {
		l.failed(err)
		return err
	}
	if changed {
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
// themselves.
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

// load loads data, under l.mu; it reports whether the rules changed.
func (l *Loader) load(data []byte) (bool, error) {
	sum := sha256.Sum256(data)
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
		return false, err
	}
	next.version = Version{N: 1, Hash: hash}
	if old != nil {
		next.version.N = old.version.N + 1
	}
	l.cur.Store(next)
	st := &Status{Version: next.version, At: time.Now(), Changes: changes, Failures: l.failures}
	l.status.Store(st)
	l.log.Info("sluice rules: loaded", "file", l.path, "version", next.version.N,
		"hash", hash[:12], "changes", len(changes))
	return true, nil
}

// build makes the state of s, keeping what it can of old (nil for the
// first load): a policy whose spec is unchanged is kept, one whose numbers
// changed is updated in place when its kind can be, and the others are new.
// Nothing of old changes until every part of s has been built.
func (l *Loader) build(old *state, s *spec) (*state, []string, error) {
	var (
		errs    []error
		made    []*built // new policies, closed if the load fails
		updates []func()
		changes []string
	)
	next := &state{spec: s, policies: map[string]*built{}, guards: map[string]*sluice.Guard{}, sigs: map[string]string{}}
	for _, ps := range s.policies {
		var prev *built
		if old != nil {
			prev = old.policies[ps.name]
		}
		if prev != nil && prev.spec.numbersOnly() == ps.numbersOnly() {
			next.policies[ps.name] = &built{spec: ps, p: prev.p, sw: prev.sw}
			continue
		}
		b, err := l.b.newPolicy(ps) // validates the numbers as the constructor does
		if err != nil {
			errs = append(errs, where(l.path, ps.at, "policy "+ps.name, err))
			continue
		}
		switch {
		case prev == nil:
			made = append(made, b)
			next.policies[ps.name] = b
			changes = append(changes, fmt.Sprintf("policy %s: new %s", ps.name, ps.kind))
		case prev.spec.sameShape(ps) && canUpdate(prev, ps):
			closePolicy(b.p)
			prev, ps := prev, ps
			next.policies[ps.name] = &built{spec: ps, p: prev.p, sw: prev.sw}
			updates = append(updates, func() {
				if err := update(prev, ps); err != nil {
					l.log.Error("sluice rules: a policy refused numbers its constructor took", "policy", ps.name, "error", err)
				}
			})
			changes = append(changes, fmt.Sprintf("policy %s: %s (in place)", ps.name, diff(prev.spec, ps)))
		default:
			made = append(made, b)
			next.policies[ps.name] = b
			changes = append(changes, fmt.Sprintf("policy %s: rebuilt: %s", ps.name, diff(prev.spec, ps)))
		}
	}
	if len(errs) == 0 {
		errs = l.buildGuards(old, next, &changes)
	}
	if len(errs) > 0 {
		for _, b := range made {
			closePolicy(b.p)
		}
		return nil, nil, errors.Join(errs...)
	}
	for _, u := range updates {
		u()
	}
	if old != nil {
		for name, b := range old.policies {
			if nb := next.policies[name]; nb == nil || nb.p != b.p {
				closePolicy(b.p)
				if nb == nil {
					changes = append(changes, fmt.Sprintf("policy %s: removed", name))
				}
			}
		}
		changes = append(changes, routeChanges(old.spec, s)...)
	}
	return next, changes, nil
}

// buildGuards makes the Guards, the route table and the Keyer of next.
func (l *Loader) buildGuards(old *state, next *state, changes *[]string) []error {
	s := next.spec
	var errs []error
	keys := map[string]middleware.KeyFunc{}
	keyed := false
	for _, gs := range s.guards {
		ps := make([]sluice.Policy, len(gs.policies))
		for i, p := range gs.policies {
			ps[i] = next.policies[p.name].p
		}
		fb, fbs, err := fallbacksOf(s, gs.name)
		if err != nil {
			errs = append(errs, where(l.path, gs.at, "guard "+gs.name+": fallbacks", err))
			continue
		}
		sig := signature(gs, ps, fbs)
		next.sigs[gs.name] = sig
		if old != nil && old.sigs[gs.name] == sig {
			next.guards[gs.name] = old.guards[gs.name]
		} else {
			opts := []sluice.Option{sluice.With(ps...)}
			if gs.timeout > 0 {
				opts = append(opts, sluice.WithTimeout(gs.timeout))
			}
			if fb != nil {
				opts = append(opts, sluice.WithFallback(fb))
			}
			g, err := sluice.New(opts...)
			if err != nil {
				errs = append(errs, where(l.path, gs.at, "guard "+gs.name, err))
				continue
			}
			next.guards[gs.name] = g
			if old != nil && old.guards[gs.name] != nil {
				*changes = append(*changes, "guard "+gs.name+": rebuilt")
			}
		}
		fn, err := keyFunc(gs.key)
		if err != nil {
			errs = append(errs, where(l.path, gs.at, "guard "+gs.name+": key", err))
		}
		if fn == nil {
			fn = noKey
		} else {
			keyed = true
		}
		keys[gs.name] = fn
	}
	if len(errs) > 0 {
		return errs
	}
	var ropts []middleware.RoutesOption
	byRoute := map[string]middleware.KeyFunc{}
	for _, r := range s.routes {
		ropts = append(ropts, middleware.RouteTo(r.pattern, next.guards[r.guard]))
		byRoute[r.pattern] = keys[r.guard]
	}
	var other middleware.KeyFunc
	if s.def != "" {
		ropts = append(ropts, middleware.DefaultRoute(next.guards[s.def]))
		other = keys[s.def]
	}
	rs, err := middleware.NewRoutes(ropts...)
	if err != nil {
		return []error{fmt.Errorf("%s: routes: %w", l.path, err)}
	}
	next.routes = rs
	if keyed {
		missing := middleware.SharedKey(sharedKey)
		for _, gs := range s.guards {
			if gs.key != nil && gs.key.reject {
				missing = middleware.RejectMissingKey()
			}
		}
		k, err := middleware.NewKeyer(missing, middleware.KeyPerRoute(byRoute, other))
		if err != nil {
			return []error{fmt.Errorf("%s: keys: %w", l.path, err)}
		}
		next.keyer = k
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
		name := f.Type().Field(i).Name
		if name == "at" || name == "shape" {
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
	if v.Type() == reflect.TypeFor[ratelimit.Rate]() {
		return ratelimit.Rate{Count: v.Field(0).Int(), Period: time.Duration(v.Field(1).Int())}.String()
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
