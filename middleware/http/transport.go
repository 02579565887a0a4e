package sluicehttp

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/fallbackof"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/middleware"
)

// TransportOption configures Transport. An option given a bad argument, or
// given twice, makes Transport return an error.
type TransportOption func(*transportConfig) error

type transportConfig struct {
	maxHosts      int
	hostOf        func(*http.Request) string
	classify      func(*http.Response, error) sluice.Outcome
	maxRetryAfter time.Duration
	wallNow       func() time.Time
	given         map[string]bool // the options given, by name
}

// once records that the option name was given, and is an error when it was
// already: the second would drop the first in silence.
func (c *transportConfig) once(name string) error {
	if c.given[name] {
		return fmt.Errorf("sluicehttp: %s given twice: give it once", name)
	}
	if c.given == nil {
		c.given = make(map[string]bool)
	}
	c.given[name] = true
	return nil
}

// WithMaxHosts bounds the number of hosts whose Guards are kept; beyond it,
// the least recently used host without a call in flight is closed and
// forgotten. A call is in flight until it fails, is rejected, or its
// response's body is closed or read to the end; a host keeps its one Guard
// while it has one. So while more than n hosts have calls in flight, more
// than n are kept, and the extra hosts are dropped as their last calls end.
// A call to a host being dropped waits for its Guard to be closed before it
// makes the next: a host never has two Guards open at once. Default 1024.
func WithMaxHosts(n int) TransportOption {
	return func(c *transportConfig) error {
		if err := c.once("WithMaxHosts"); err != nil {
			return err
		}
		if n < 1 {
			return fmt.Errorf("sluicehttp: WithMaxHosts: %d < 1", n)
		}
		c.maxHosts = n
		return nil
	}
}

// WithHostFunc names the host a request is guarded under. Default: the
// request URL's Host.
func WithHostFunc(fn func(*http.Request) string) TransportOption {
	return func(c *transportConfig) error {
		if err := c.once("WithHostFunc"); err != nil {
			return err
		}
		if fn == nil {
			return errors.New("sluicehttp: WithHostFunc: nil function")
		}
		c.hostOf = fn
		return nil
	}
}

// WithResponseClassifier decides what a call's response, or its error when
// there is no response, says about the host's health. Default: by status as
// middleware.ClassifyHTTPStatus does, and errors as the Guard's Classifier
// does (a cancelled call is ignored, any other error is a failure).
func WithResponseClassifier(fn func(resp *http.Response, err error) sluice.Outcome) TransportOption {
	return func(c *transportConfig) error {
		if err := c.once("WithResponseClassifier"); err != nil {
			return err
		}
		if fn == nil {
			return errors.New("sluicehttp: WithResponseClassifier: nil function")
		}
		c.classify = fn
		return nil
	}
}

// WithMaxRetryAfter caps how long a dependency's Retry-After may hold its
// breaker open; 0 turns the holding off, for a client whose calls carry
// quotas of their own (a gateway forwarding each tenant's credentials,
// whose 429 speaks for one tenant alone). Default 10 minutes.
func WithMaxRetryAfter(d time.Duration) TransportOption {
	return func(c *transportConfig) error {
		if err := c.once("WithMaxRetryAfter"); err != nil {
			return err
		}
		if d < 0 {
			return fmt.Errorf("sluicehttp: WithMaxRetryAfter: %v is negative", d)
		}
		c.maxRetryAfter = d
		return nil
	}
}

// RoundTripper is an http.RoundTripper that guards each call with its host's
// Guard. Build it with Transport.
type RoundTripper struct {
	next    http.RoundTripper
	factory func(host string) (*sluice.Guard, error)
	cfg     transportConfig

	mu      sync.Mutex
	hosts   map[string]*list.Element
	lru     list.List // front: most recently used; values *hostGuard
	pending map[string]*pendingGuard
	// closing holds, for each host dropped (by WithMaxHosts or Close)
	// whose Guard is being closed, a channel closed once it is: a call to
	// the host waits for it before making the next, so that a host never
	// has two Guards open at once (observers refuse a second live Guard of
	// a name).
	closing map[string]chan struct{}
}

// pendingGuard is a host's Guard being made: the calls that want it meanwhile
// wait for the one factory call.
type pendingGuard struct {
	ready chan struct{} // closed once hg or err is set
	hg    *hostGuard    // the kept host, holding a call for the maker and each waiter
	err   error
	// waiters counts the calls waiting for ready; resolved reports that hg
	// and err are set. Both under the RoundTripper's mu.
	waiters  int
	resolved bool
}

// hostGuard is a kept host and its Guard (nil: its calls go unguarded).
type hostGuard struct {
	host string
	g    *sluice.Guard
	// calls counts the calls holding the host, from the moment they get it
	// until they end: only a host without calls is dropped, so that a host
	// never has two Guards at once (short of Close). el is the host's entry
	// in the LRU list, nil once it is dropped. Both under the RoundTripper's
	// mu.
	calls int
	el    *list.Element
}

// Transport returns a RoundTripper that guards the calls next makes, per
// host, with the Guards guards returns (made once per host and kept).
//
// guards returns the Guard for the calls to one host ("api.example.com:443"
// as the request's URL gives it). A nil Guard lets the host's calls through
// unguarded; an error fails the call without sending it (the next call asks
// again). A panic goes on up the call that ran guards and fails the calls
// that were waiting for the host's Guard; the next call asks again. The
// Transport calls guards once per host it keeps and owns what it returns:
// it closes a host's Guard when it drops the host (past WithMaxHosts, once
// no call of the host is in flight) and on Close. So return a new Guard on
// every call, never one shared with other code; policies meant to span
// hosts (a process-wide limiter) can be shared inside the new Guards as long
// as they have no Close of their own.
//
// A call its host's Guard rejects is not sent: RoundTrip returns the
// rejection, matching sluice.ErrRejected (and closes the request's body, as the RoundTripper
// contract asks). The Guard's fallbacks that answer an *http.Response
// (degrade.New[*http.Response]) answer it instead, as they answer a call
// that failed before its response (an error of the RoundTripper beneath, a
// timeout); a response, whatever its status, is returned as it came. Such
// a fallback must answer a new response each time, its body unread (a
// degrade.Value would hand every caller the one body); a fallback of
// another type that declares an answer is reported as an error, as
// sluice.Execute reports it. A call that is sent is classified by its response's status
// (5xx a failure, 4xx ignored) when the caller closes the response's body or
// reads it to the end, so that a concurrency limit counts the call until then.
// A 429 or 503 with a Retry-After opens every policy of the host's Guard
// that can be held open (a sluice.Opener: a breaker; of a breaker.Group, the
// breaker of the host, which the call's resource names) for that long,
// capped by WithMaxRetryAfter. The host is the call's resource
// (sluice.WithResource) for a Guard that reads one (see
// sluice.NeedsResource); for another no context is made to carry it. A call
// whose context has ended before it is sent is not sent, and counts for
// nothing (see RoundTrip). next nil means http.DefaultTransport.
//
// A host's Guard declared with sluice.WithRetry has its failed calls sent
// again, each attempt admitted afresh and sharing the Guard's retry budget:
// a 429, 502, 503 or 504 (after its Retry-After, if any, which the Retry's
// MaxBackoff caps), or an error of the RoundTripper beneath that is a
// failure. Only what is safe to repeat is: a GET, HEAD, OPTIONS, PUT or
// DELETE, or a request with an Idempotency-Key header, whose body, if any,
// GetBody gives again (http.NewRequest sets it for in-memory bodies). The
// caller gets the last attempt's answer.
func Transport(next http.RoundTripper, guards func(host string) (*sluice.Guard, error), opts ...TransportOption) (*RoundTripper, error) {
	if guards == nil {
		return nil, errors.New("sluicehttp: Transport: nil guards function")
	}
	if next == nil {
		next = http.DefaultTransport
	}
	t := &RoundTripper{
		next:    next,
		factory: guards,
		cfg: transportConfig{
			maxHosts:      1024,
			hostOf:        func(r *http.Request) string { return r.URL.Host },
			maxRetryAfter: 10 * time.Minute,
			wallNow:       time.Now,
		},
		hosts: make(map[string]*list.Element), pending: make(map[string]*pendingGuard),
		closing: make(map[string]chan struct{}),
	}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("sluicehttp: Transport: option %d is nil", i)
		}
		if err := o(&t.cfg); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// guard returns host's entry, making its Guard on first use, with a call
// counted on it: the caller ends it with end. The factory runs outside the
// lock, once per host: calls that want the Guard meanwhile wait for it, or
// for their context to end (ctx.Err()).
func (t *RoundTripper) guard(ctx context.Context, host string) (*hostGuard, error) {
	t.mu.Lock()
	for {
		closing, ok := t.closing[host]
		if !ok {
			break
		}
		t.mu.Unlock()
		select {
		case <-closing:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		t.mu.Lock()
	}
	if el, ok := t.hosts[host]; ok {
		t.lru.MoveToFront(el)
		hg := el.Value.(*hostGuard)
		hg.calls++
		t.mu.Unlock()
		return hg, nil
	}
	if p, ok := t.pending[host]; ok {
		p.waiters++
		t.mu.Unlock()
		select {
		case <-p.ready:
			return p.hg, p.err
		case <-ctx.Done():
			t.mu.Lock()
			hg := p.hg
			if !p.resolved {
				p.waiters-- // the maker will not count this call
			}
			t.mu.Unlock()
			if hg != nil {
				t.end(hg) // counted for this call already
			}
			return nil, ctx.Err()
		}
	}
	p := &pendingGuard{ready: make(chan struct{})}
	t.pending[host] = p
	t.mu.Unlock()
	t.makeGuard(host, p)
	return p.hg, p.err
}

// end ends a call that held hg. The last call of a host kept beyond
// WithMaxHosts drops it.
func (t *RoundTripper) end(hg *hostGuard) {
	t.mu.Lock()
	hg.calls--
	drop := false
	// Any other host without calls was dropped when it lost its last call
	// or when a host was added, whichever came last, had the table been
	// full then: hg is the only one that may go.
	if hg.calls == 0 && hg.el != nil && t.lru.Len() > t.cfg.maxHosts {
		t.dropLocked(hg)
		drop = true
	}
	t.mu.Unlock()
	if drop {
		_ = t.closeDropped(hg)
	}
}

// dropLocked forgets hg, whose Guard the caller closes with closeDropped
// once t.mu is released; t.mu is held.
func (t *RoundTripper) dropLocked(hg *hostGuard) {
	t.lru.Remove(hg.el)
	hg.el = nil
	delete(t.hosts, hg.host)
	t.closing[hg.host] = make(chan struct{})
}

// closeDropped closes the Guards of the hosts dropLocked dropped, letting
// the calls that wait for each make its next once it is closed.
func (t *RoundTripper) closeDropped(hgs ...*hostGuard) error {
	var errs []error
	done := 0
	defer func() {
		// A Close that panicked leaves its Guard and those after it
		// unclosed; their hosts are let go all the same, so that no call
		// waits for them for good.
		for _, hg := range hgs[done:] {
			t.closed(hg)
		}
	}()
	for _, hg := range hgs {
		if err := hg.g.Close(); err != nil {
			errs = append(errs, err)
		}
		t.closed(hg)
		done++
	}
	return errors.Join(errs...)
}

// closed lets the calls that wait for hg's Guard to be closed go on.
func (t *RoundTripper) closed(hg *hostGuard) {
	t.mu.Lock()
	ch := t.closing[hg.host]
	delete(t.closing, hg.host)
	t.mu.Unlock()
	close(ch)
}

// evictLocked drops the least recently used hosts without calls until at
// most maxHosts are kept or every host kept has calls, and returns them,
// for closeDropped; t.mu is held.
func (t *RoundTripper) evictLocked() []*hostGuard {
	var evicted []*hostGuard
	for el := t.lru.Back(); el != nil && t.lru.Len() > t.cfg.maxHosts; {
		prev := el.Prev()
		if hg := el.Value.(*hostGuard); hg.calls == 0 {
			t.dropLocked(hg)
			evicted = append(evicted, hg)
		}
		el = prev
	}
	return evicted
}

// errFactoryPanicked fails the calls that waited for a Guard whose
// guards function panicked; the next call asks it again.
var errFactoryPanicked = errors.New("the guards function panicked")

// makeGuard runs the factory for host and resolves p with its result: the
// host's entry, holding a call for the caller and for each call waiting on
// p, or the factory's error. When the factory panics (or exits its
// goroutine) the host's pending entry is resolved all the same, with
// errFactoryPanicked for the calls waiting on it, and the panic goes on.
func (t *RoundTripper) makeGuard(host string, p *pendingGuard) {
	var g *sluice.Guard
	err := errFactoryPanicked
	defer func() {
		t.mu.Lock()
		delete(t.pending, host)
		var evicted []*hostGuard
		if err == nil {
			hg := &hostGuard{host: host, g: g, calls: 1 + p.waiters}
			hg.el = t.lru.PushFront(hg)
			t.hosts[host] = hg.el
			p.hg = hg
			evicted = t.evictLocked()
		} else {
			p.err = fmt.Errorf("sluicehttp: guard for host %q: %w", host, err)
		}
		p.resolved = true
		t.mu.Unlock()
		close(p.ready)
		_ = t.closeDropped(evicted...)
	}()
	g, err = t.factory(host)
}

// Guard returns the Guard that guards the calls to host (as WithHostFunc
// names hosts; by default the request URL's host, port included), to look
// at its state or force its breaker, and false while the RoundTripper keeps
// none for host: before its first call, after it was dropped (WithMaxHosts,
// Close, which close it), or when the guards function gave it none.
func (t *RoundTripper) Guard(host string) (*sluice.Guard, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	el, ok := t.hosts[host]
	if !ok {
		return nil, false
	}
	g := el.Value.(*hostGuard).g
	return g, g != nil
}

// Close closes every kept Guard, whether or not its host has calls in
// flight, and forgets them. A call to a host meanwhile waits for its Guard
// to be closed before it makes the next.
func (t *RoundTripper) Close() error {
	t.mu.Lock()
	var hgs []*hostGuard
	for el := t.lru.Front(); el != nil; {
		next := el.Next()
		hg := el.Value.(*hostGuard)
		t.dropLocked(hg)
		hgs = append(hgs, hg)
		el = next
	}
	t.mu.Unlock()
	return t.closeDropped(hgs...)
}

// CloseIdleConnections closes the idle connections of the RoundTripper
// beneath, when it can.
func (t *RoundTripper) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// RoundTrip sends req through its host's Guard. A call that waits for its
// host's Guard to be made (by another call's guards function) ends with its
// context: it returns the context's error, after closing the request's body.
// So does a call whose context has already ended (a handler's inherited
// deadline that passed): it is never sent, asks no Guard and counts for
// nothing, rather than as a failure of a host that never heard of it. One
// whose context ends while its host's Guard is made is not sent either, and
// nor is one whose context ends while a policy of the Guard makes it wait:
// a policy that gives up the wait rejects it (a queued concurrency limit:
// its rejection), and one admitted as its context ended gives
// back what the Guard took (sluice.Released) and returns the context's
// error.
func (t *RoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		closeRequestBody(req)
		return nil, errors.New("sluicehttp: Transport: nil Request.URL")
	}
	if err := req.Context().Err(); err != nil {
		closeRequestBody(req)
		return nil, err
	}
	host := t.cfg.hostOf(req)
	hg, err := t.guard(req.Context(), host)
	if err == nil {
		// It may have ended while the host's Guard was made.
		if err = req.Context().Err(); err != nil {
			t.end(hg)
		}
	}
	if err != nil {
		closeRequestBody(req)
		return nil, err
	}
	g := hg.g
	if g == nil {
		t.end(hg)
		return t.next.RoundTrip(req)
	}
	// The call holds its host until it ends: here, or, once its body is
	// handed over, when the body ends.
	var call sluice.Call
	handedOver := false
	// unreturned is the dependency's answer while it is neither returned nor
	// handed over: a panic meanwhile closes it, or its connection stays open.
	var unreturned *http.Response
	defer func() {
		if handedOver {
			return
		}
		// After a panic of the RoundTripper beneath, of the classifier or of
		// a listener the call failed; on any other return its outcome is
		// recorded and its timeout ended already, and only the host is left
		// to let go.
		if unreturned != nil && unreturned.Body != nil {
			_ = unreturned.Body.Close()
		}
		call.Report(sluice.Failure, nil) // nothing if it was reported
		t.end(hg)
	}()
	// The context the Guard decides with: with the host as the call's
	// resource, for a Guard that reads it (an allocation).
	gctx := req.Context()
	if guardhook.ReadsResource(g) {
		gctx = sluice.WithResource(gctx, host)
	}
	// A request safe to repeat is tried again as its host's Guard declares
	// (sluice.WithRetry): each attempt admitted afresh, its body replayed.
	// Its body is had again (GetBody: a file reopened, a buffer copied)
	// only for an attempt that may follow.
	replay := repeatable(req)
	most := guardhook.RetryAttempts(g)
	var resp *http.Response
	var o sluice.Outcome
	for attempts := 1; ; attempts++ {
		if err = g.Begin(gctx, &call); err != nil {
			closeRequestBody(req)
			return t.fallback(gctx, g, req, err)
		}
		if err := req.Context().Err(); err != nil {
			// It ended while a policy made it wait: never sent, it gives back
			// what the Guard took.
			call.Report(sluice.Released, nil)
			closeRequestBody(req)
			return nil, err
		}
		// The Guard's call timeout (sluice.WithTimeout) runs until the response's
		// body ends. An upgrade keeps its connection and runs without it.
		sent := req
		if ctx := call.Context(); ctx != gctx && req.Header.Get("Upgrade") == "" {
			sent = req.WithContext(ctx)
		}
		began := time.Now() // how long an attempt takes, for the deadline
		resp, err = t.next.RoundTrip(sent)
		if err != nil {
			if resp != nil && resp.Body != nil {
				discard(resp.Body)
			}
			if replay && attempts < most {
				// Classified as the attempt's end would be: by the
				// Transport's classifier, else the Guard's, a timeout once
				// the Guard's deadline has passed.
				o := t.errOutcome(&call, err)
				if o == sluice.Failure && req.Context().Err() == nil {
					// The body to send again is had first: without it, the
					// caller gets this attempt's error, and no retry is
					// spent.
					if next, rerr := replayed(req); rerr == nil {
						if d, ok := guardhook.RetryDelay(g, req.Context(), attempts, began, 0); ok {
							call.Report(o, err)
							if err = wait(req.Context(), d); err != nil {
								closeRequestBody(next)
								return nil, err
							}
							req = next
							continue
						}
						if next != req {
							closeRequestBody(next)
						}
					}
				}
			}
			return t.fallback(gctx, g, req, call.Report(t.errOutcome(&call, err), err))
		}
		unreturned = resp
		o = middleware.ClassifyHTTPStatus(resp.StatusCode)
		if t.cfg.classify != nil {
			o = t.cfg.classify(resp, nil)
		}
		if (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && t.cfg.maxRetryAfter > 0 {
			if ra, ok := t.retryAfter(resp.Header.Get("Retry-After")); ok {
				// The breakers open now, as the answer arrived, for the
				// whole delay asked; the call itself ends with its body, as
				// any other, so a concurrency limit counts it until then (a
				// breaker drops the outcome of a call from before it opened).
				now := guardhook.Now(g)
				for _, p := range g.Policies() {
					if op, ok := p.(sluice.Opener); ok {
						op.OpenFor(gctx, now, ra)
					}
				}
			}
		}
		if !replay || attempts >= most || !retryStatus(resp.StatusCode) {
			break
		}
		// The peer's Retry-After is the least delay, the jitter added to
		// it; one past the Retry's MaxBackoff ends the retries.
		atLeast, _ := t.parseRetryAfter(resp.Header.Get("Retry-After"), maxDelay)
		// The body to send again is had before the answer is let go:
		// without it, the caller gets this answer, and no retry is spent.
		next, rerr := replayed(req)
		if rerr != nil {
			break
		}
		d, ok := guardhook.RetryDelay(g, req.Context(), attempts, began, atLeast)
		if !ok {
			if next != req {
				closeRequestBody(next)
			}
			break
		}
		if resp.Body != nil {
			discard(resp.Body)
		}
		unreturned = nil
		call.Report(o, nil)
		if err = wait(req.Context(), d); err != nil {
			closeRequestBody(next)
			return nil, err
		}
		req = next
	}
	// A body that is a whole connection (101 Switching Protocols) is handed
	// over as it is: it must stay an io.ReadWriteCloser.
	if resp.Body == nil || resp.Body == http.NoBody || resp.StatusCode == http.StatusSwitchingProtocols {
		call.Report(o, nil)
		unreturned = nil
		return resp, nil
	}
	resp.Body = t.guardBody(resp.Body, &bodyState{call: call, outcome: o, t: t, host: hg})
	handedOver = true
	return resp, nil
}

// fallback answers err, a rejection of a call of req by g or its failure
// before a response (a timeout once past the Guard's deadline), with the
// first of g's fallbacks answering an *http.Response that declares an
// answer for it; one that declines (answers an error) has the last word.
// With none, a fallback of another type that declares one is a mistake,
// reported as an error; else err is returned.
func (t *RoundTripper) fallback(ctx context.Context, g *sluice.Guard, req *http.Request, err error) (*http.Response, error) {
	if guardhook.NumFallbacks(g) == 0 {
		return nil, err
	}
	resp, out := fallbackof.Value[*http.Response](ctx, g, err)
	if out != nil {
		return nil, out // a nil *http.Response among the errors
	}
	if resp.Request == nil || resp.Body == nil {
		r := *resp // the fallback's own is left as it made it
		if r.Request == nil {
			r.Request = req
		}
		if r.Body == nil {
			r.Body = http.NoBody
		}
		resp = &r
	}
	return resp, nil
}

// errOutcome classifies err, the error of call that failed before its
// response or while its body was read, as the call's end would be: by the
// Guard's Classifier (a timeout once the Guard's deadline has passed; a
// call canceled by its caller with a cause handed to it as
// context.Canceled), or, with WithResponseClassifier, by that one, a call
// its caller canceled being Ignored whatever error the cancel made.
func (t *RoundTripper) errOutcome(call *sluice.Call, err error) sluice.Outcome {
	if t.cfg.classify == nil {
		return sluice.Outcome(guardhook.Classify(call, err))
	}
	if call.Context().Err() == context.Canceled {
		return sluice.Ignored
	}
	return t.cfg.classify(nil, err)
}

// guardBody returns body, whose end ends the call st describes.
func (t *RoundTripper) guardBody(body io.ReadCloser, st *bodyState) *guardedBody {
	gb := &guardedBody{ReadCloser: body, st: st}
	// A caller that drops the body without closing it (a bug, but a common
	// one) must not hold a half-open probe, a concurrency slot or its host
	// forever: once the body is unreachable, the call ends as Ignored.
	runtime.AddCleanup(gb, func(st *bodyState) { st.finish(sluice.Ignored, nil) }, st)
	return gb
}

// retryAfter parses a Retry-After field: delay-seconds (1*DIGIT, however
// many) or an HTTP-date, capped by WithMaxRetryAfter.
func (t *RoundTripper) retryAfter(v string) (time.Duration, bool) {
	return t.parseRetryAfter(v, t.cfg.maxRetryAfter)
}

// maxDelay bounds a peer's delay where nothing else does, so that it stays
// a Duration: a delay that long is past any Retry's MaxBackoff.
const maxDelay = time.Duration(1<<63 - 1)

// parseRetryAfter is retryAfter capped at limit.
func (t *RoundTripper) parseRetryAfter(v string, limit time.Duration) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if digits(v) {
		s, err := strconv.ParseInt(v, 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange):
			// Still a delay, longer than any cap.
			return limit, true
		case err != nil, s == 0:
			return 0, false
		case s > int64(limit/time.Second):
			return limit, true
		}
		d = time.Duration(s) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(t.cfg.wallNow())
		if d <= 0 {
			return 0, false
		}
	} else {
		return 0, false
	}
	return min(d, limit), true
}

// digits reports whether s is all ASCII digits.
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// repeatable reports whether req may be sent again: its method is safe to
// repeat (GET, HEAD, OPTIONS, PUT, DELETE) or it carries an Idempotency-Key,
// and its body, if any, can be had again (GetBody). An upgrade never is.
func repeatable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil || req.Header.Get("Upgrade") != "" {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get("Idempotency-Key") != ""
}

// retryStatus reports whether a response with status code says the same
// request may fare better later: 429, 502, 503, 504.
func retryStatus(code int) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// replayed returns req ready to be sent once more, its body had again
// (GetBody); req itself when it has none.
func replayed(req *http.Request) (*http.Request, error) {
	if req.GetBody == nil || req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	r := *req // a shallow copy: RoundTrip must not change the caller's request
	r.Body = body
	return &r, nil
}

// wait waits d, or until ctx ends: then it returns ctx's error.
func wait(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// discard drains a little of a body nobody will read, so its connection can
// be reused, and closes it.
func discard(b io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, b, 4<<10)
	_ = b.Close()
}

// guardedBody reports the call's outcome when its body is read to the end,
// fails to read, or is closed, whichever comes first; or, as Ignored, when
// it is dropped unclosed and collected.
type guardedBody struct {
	io.ReadCloser
	st *bodyState
}

// bodyState is what a guardedBody's end reports, apart from the body itself
// so that the cleanup of a dropped body can reach it.
type bodyState struct {
	ended   atomic.Bool
	call    sluice.Call
	outcome sluice.Outcome
	t       *RoundTripper
	host    *hostGuard // the host the call holds until it ends
}

// Read reads the body; its end (io.EOF) or its first error ends the call.
// An error while a Success was read makes it what the same error before
// the response would have been (see errOutcome); the call's end is told
// the error, a timeout once the Guard's deadline has passed.
func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.st.finish(b.st.outcome, nil)
	} else if err != nil && !b.st.ended.Load() {
		b.st.failed(err)
	}
	return n, err
}

// failed ends the call whose body failed to read with err. A classifier
// that panics leaves the call failed, as RoundTrip does, and the host let
// go; the panic goes on.
func (s *bodyState) failed(err error) {
	o := s.outcome
	if o == sluice.Success {
		classified := false
		defer func() {
			if !classified {
				s.finish(sluice.Failure, err)
			}
		}()
		o = s.t.errOutcome(&s.call, err)
		classified = true
	}
	s.finish(o, err)
}

func (b *guardedBody) Close() error {
	err := b.ReadCloser.Close()
	b.st.finish(b.st.outcome, nil)
	return err
}

func (s *bodyState) finish(o sluice.Outcome, err error) {
	if s.ended.CompareAndSwap(false, true) {
		// Deferred: a policy's Done that panics (a state listener) must not
		// leave the host held or the deadline's timer running.
		defer s.t.end(s.host)
		s.call.Report(o, err)
	}
}
