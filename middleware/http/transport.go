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
	"github.com/sluice-go/sluice/middleware"
)

// GuardFactory returns the Guard for the calls to one host ("api.example.com:443"
// as the request's URL gives it). A nil Guard lets the host's calls through
// unguarded; an error fails the call without sending it (the next call asks
// again). A panic goes on up the call that ran the factory and fails the
// calls that were waiting for the host's Guard; the next call asks again.
//
// The Transport calls it once per host it keeps and owns what it returns: it
// closes a host's Guard when it drops the host (past WithMaxHosts) and on
// Close. So return a new Guard on every call, never one shared with other
// code; policies meant to span hosts (a process-wide limiter) can be shared
// inside the new Guards as long as they have no Close of their own.
type GuardFactory func(host string) (*sluice.Guard, error)

// TransportOption configures Transport.
type TransportOption func(*transportConfig) error

type transportConfig struct {
	maxHosts      int
	hostOf        func(*http.Request) string
	classify      func(*http.Response, error) sluice.Outcome
	maxRetryAfter time.Duration
	wallNow       func() time.Time
}

// WithMaxHosts bounds the number of hosts whose Guards are kept; the least
// recently used one is closed and forgotten beyond it. Default 1024.
func WithMaxHosts(n int) TransportOption {
	return func(c *transportConfig) error {
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
		if fn == nil {
			return errors.New("sluicehttp: WithResponseClassifier: nil function")
		}
		c.classify = fn
		return nil
	}
}

// WithMaxRetryAfter caps how long a dependency's Retry-After may hold its
// breaker open. Default 10 minutes.
func WithMaxRetryAfter(d time.Duration) TransportOption {
	return func(c *transportConfig) error {
		if d <= 0 {
			return fmt.Errorf("sluicehttp: WithMaxRetryAfter: %v <= 0", d)
		}
		c.maxRetryAfter = d
		return nil
	}
}

// opener is implemented by breakers that can be held open for a time
// (breaker.Breaker's OpenFor).
type opener interface {
	OpenFor(now, d time.Duration)
}

// RoundTripper is an http.RoundTripper that guards each call with its host's
// Guard. Build it with Transport.
type RoundTripper struct {
	next    http.RoundTripper
	factory GuardFactory
	cfg     transportConfig

	mu      sync.Mutex
	hosts   map[string]*list.Element
	lru     list.List // front: most recently used; values *hostGuard
	pending map[string]*pendingGuard
}

// pendingGuard is a host's Guard being made: the calls that want it meanwhile
// wait for the one factory call.
type pendingGuard struct {
	ready chan struct{}
	g     *sluice.Guard
	err   error
}

type hostGuard struct {
	host string
	g    *sluice.Guard
}

// Transport returns a RoundTripper that guards the calls next makes, per
// host, with the Guards guards returns (made once per host and kept).
//
// A call its host's Guard rejects is not sent: RoundTrip returns the
// *sluice.RejectedError (and closes the request's body, as the RoundTripper
// contract asks). A call that is sent is classified by its response's status
// (5xx a failure, 4xx ignored) when the caller closes the response's body or
// reads it to the end, so that a concurrency limit counts the call until then.
// A 429 or 503 with a Retry-After opens every policy of the host's Guard
// that can be held open (a breaker's OpenFor) for that long, capped by
// WithMaxRetryAfter. next nil means http.DefaultTransport.
func Transport(next http.RoundTripper, guards GuardFactory, opts ...TransportOption) (*RoundTripper, error) {
	if guards == nil {
		return nil, errors.New("sluicehttp: Transport: nil GuardFactory")
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
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&t.cfg); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// guard returns host's Guard, making it on first use. The factory runs
// outside the lock, once per host: calls that want the Guard meanwhile wait
// for it.
func (t *RoundTripper) guard(host string) (*sluice.Guard, error) {
	t.mu.Lock()
	if el, ok := t.hosts[host]; ok {
		t.lru.MoveToFront(el)
		g := el.Value.(*hostGuard).g
		t.mu.Unlock()
		return g, nil
	}
	if p, ok := t.pending[host]; ok {
		t.mu.Unlock()
		<-p.ready
		return p.g, p.err
	}
	p := &pendingGuard{ready: make(chan struct{})}
	t.pending[host] = p
	t.mu.Unlock()
	t.makeGuard(host, p)
	return p.g, p.err
}

// errFactoryPanicked fails the calls that waited for a Guard whose
// GuardFactory panicked; the next call asks the factory again.
var errFactoryPanicked = errors.New("the GuardFactory panicked")

// makeGuard runs the factory for host and resolves p with its result. When
// the factory panics (or exits its goroutine) the host's pending entry is
// resolved all the same, with errFactoryPanicked for the calls waiting on
// it, and the panic goes on.
func (t *RoundTripper) makeGuard(host string, p *pendingGuard) {
	returned := false
	defer func() {
		if !returned {
			p.g, p.err = nil, errFactoryPanicked
		}
		t.mu.Lock()
		delete(t.pending, host)
		var evicted []*sluice.Guard
		if p.err == nil {
			t.hosts[host] = t.lru.PushFront(&hostGuard{host: host, g: p.g})
			for t.lru.Len() > t.cfg.maxHosts {
				last := t.lru.Back()
				t.lru.Remove(last)
				hg := last.Value.(*hostGuard)
				delete(t.hosts, hg.host)
				evicted = append(evicted, hg.g)
			}
		}
		t.mu.Unlock()
		close(p.ready)
		for _, e := range evicted {
			_ = e.Close()
		}
	}()
	p.g, p.err = t.factory(host)
	returned = true
}

// Hosts returns the number of hosts whose Guards are kept.
func (t *RoundTripper) Hosts() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}

// Close closes every kept Guard and forgets them.
func (t *RoundTripper) Close() error {
	t.mu.Lock()
	var gs []*sluice.Guard
	for el := t.lru.Front(); el != nil; el = el.Next() {
		gs = append(gs, el.Value.(*hostGuard).g)
	}
	t.lru.Init()
	t.hosts = make(map[string]*list.Element)
	t.mu.Unlock()
	var errs []error
	for _, g := range gs {
		if err := g.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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

// RoundTrip sends req through its host's Guard.
func (t *RoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	host := t.cfg.hostOf(req)
	g, err := t.guard(host)
	if err != nil {
		closeRequestBody(req)
		return nil, fmt.Errorf("sluicehttp: guard for host %q: %w", host, err)
	}
	if g == nil {
		return t.next.RoundTrip(req)
	}
	var done sluice.Done
	if err := g.AdmitTo(sluice.WithResource(req.Context(), host), nil, &done); err != nil {
		closeRequestBody(req)
		return nil, err
	}
	// The Guard's call timeout (sluice.WithTimeout) runs until the response's
	// body ends. An upgrade keeps its connection and runs without it.
	var release func(error) error
	if g.Timeout() > 0 && req.Header.Get("Upgrade") == "" {
		var ctx context.Context
		ctx, release = g.CallContext(req.Context())
		req = req.WithContext(ctx)
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		if resp != nil && resp.Body != nil {
			discard(resp.Body)
		}
		if release != nil {
			err = release(err)
		}
		o := g.Classify(err)
		if t.cfg.classify != nil {
			o = t.cfg.classify(nil, err)
		}
		done.Record(o)
		return nil, err
	}
	o := middleware.ClassifyHTTPStatus(resp.StatusCode)
	if t.cfg.classify != nil {
		o = t.cfg.classify(resp, nil)
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if ra, ok := t.retryAfter(resp.Header.Get("Retry-After")); ok {
			done.Record(o)
			now := g.Now()
			for _, p := range g.Policies() {
				if op, ok := p.(opener); ok {
					op.OpenFor(now, ra)
				}
			}
			if release != nil {
				resp.Body = &releasingBody{ReadCloser: resp.Body, release: release}
			}
			return resp, nil
		}
	}
	// A body that is a whole connection (101 Switching Protocols) is handed
	// over as it is: it must stay an io.ReadWriteCloser.
	if resp.Body == nil || resp.Body == http.NoBody || resp.StatusCode == http.StatusSwitchingProtocols {
		done.Record(o)
		if release != nil {
			_ = release(nil)
		}
		return resp, nil
	}
	st := &bodyState{done: done, outcome: o, release: release}
	gb := &guardedBody{ReadCloser: resp.Body, st: st}
	// A caller that drops the body without closing it (a bug, but a common
	// one) must not hold a half-open probe or a concurrency slot forever:
	// once the body is unreachable, the call ends as Ignored.
	runtime.AddCleanup(gb, func(st *bodyState) { st.finish(sluice.Ignored) }, st)
	resp.Body = gb
	return resp, nil
}

// retryAfter parses a Retry-After field: delay-seconds (1*DIGIT, however
// many) or an HTTP-date.
func (t *RoundTripper) retryAfter(v string) (time.Duration, bool) {
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
			return t.cfg.maxRetryAfter, true
		case err != nil, s == 0:
			return 0, false
		case s > int64(t.cfg.maxRetryAfter/time.Second):
			return t.cfg.maxRetryAfter, true
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
	return min(d, t.cfg.maxRetryAfter), true
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
	done    sluice.Done
	outcome sluice.Outcome
	release func(error) error // ends the Guard's call timeout; nil without one
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		o := b.st.outcome
		if err != io.EOF && o == sluice.Success {
			o = sluice.Failure
			if errors.Is(err, context.Canceled) {
				o = sluice.Ignored
			}
		}
		b.st.finish(o)
	}
	return n, err
}

func (b *guardedBody) Close() error {
	err := b.ReadCloser.Close()
	b.st.finish(b.st.outcome)
	return err
}

func (s *bodyState) finish(o sluice.Outcome) {
	if s.ended.CompareAndSwap(false, true) {
		s.done.Record(o)
		if s.release != nil {
			_ = s.release(nil)
		}
	}
}

// releasingBody ends the Guard's call timeout when the body is closed, for
// responses whose outcome is recorded already.
type releasingBody struct {
	io.ReadCloser
	release func(error) error
	once    sync.Once
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { _ = b.release(nil) })
	return err
}
