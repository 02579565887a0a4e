package dashboard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/observe/dashboard/internal/redisnote"
	"github.com/sluice-go/sluice/ratelimit"
)

// A page of another site whose host name is rebound to 127.0.0.1 (DNS
// rebinding) is same-origin to the browser: it reads the page's token and
// posts an action with it, from a loopback address, with
// Sec-Fetch-Site: same-origin and an Origin that matches its Host. The
// documented loopback authorizer allows it.
func TestAnActionThroughAForeignHostIsRefused(t *testing.T) {
	loopback := func(r *http.Request) bool {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		return err == nil && net.ParseIP(host).IsLoopback()
	}
	f := newFixture(t, WithAuthorizer(loopback))
	mux := http.NewServeMux()
	mux.Handle("/debug/sluice/", f.d)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	evil := "rebind.attacker.test:" + port // resolves to 127.0.0.1 by now

	page, err := http.NewRequest(http.MethodGet, srv.URL+"/debug/sluice/", nil)
	require.NoError(t, err)
	page.Host = evil
	page.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := srv.Client().Do(page)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_, rest, ok := strings.Cut(string(body), `data-token="`)
	require.True(t, ok)
	tok, _, _ := strings.Cut(rest, `"`)

	form := url.Values{"token": {tok}, "guard": {"pay"}, "policy": {"3"}, "action": {"open"}}
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/debug/sluice/api/action", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Host = evil
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Origin", "http://"+evil)
	resp, err = srv.Client().Do(req)
	require.NoError(t, err)
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "an action under a foreign Host name: %s", out)
	assert.Equal(t, breaker.StateClosed, f.br.State(), "a site on the internet forced the breaker open")
}

// Two snapshots at once (two viewers' streams): the one that read the rules'
// status before a reload records it after the one that read it after.
func TestConcurrentSnapshotsNeverShowRulesRolledBack(t *testing.T) {
	var calls atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	t1 := time.Unix(1e9, 0)
	d, err := New(WithRules(func() (string, time.Time, error) {
		if calls.Add(1) == 1 {
			close(entered)
			<-release // read before the reload; descheduled
			return "v1", t1, nil
		}
		return "v2", t1.Add(time.Minute), nil // after it
	}))
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { d.snapshot(time.Now()); close(done) }()
	<-entered
	second := make(chan struct{})
	go func() { d.snapshot(time.Now()); close(second) }() // reads after the reload
	time.Sleep(10 * time.Millisecond)
	close(release)
	<-done
	<-second

	var reloads []string
	for _, e := range d.events.last() {
		if e.Kind == "reload" {
			reloads = append(reloads, e.Text)
		}
	}
	require.NotEmpty(t, reloads)
	assert.Equal(t, "rules v2 in force", reloads[0], "the newest reload event, of %q", reloads)
	assert.Equal(t, "v2", d.rulesSeen.Version, "the status last shown")
}

// Two limiters of the same name in one chain (the default names: the core
// allows it, and SetShadow acts on all of a name): the quota of the second
// shows beside the first, with the first's window, and the second shows
// none.
func TestSameNamedLimitersShowNoQuota(t *testing.T) {
	d, err := New()
	require.NoError(t, err)
	perMinute, err := ratelimit.NewFixedWindow(100, time.Minute) // "ratelimit/fixed-window"
	require.NoError(t, err)
	perHour, err := ratelimit.NewFixedWindow(2, time.Hour) // "ratelimit/fixed-window"
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("g"), sluice.With(perMinute, perHour), sluice.WithObserver(d))
	require.NoError(t, err)
	defer g.Close()
	require.NoError(t, g.Do(context.Background(), func(context.Context) error { return nil }))

	figures := func(i int) map[string]string {
		m := map[string]string{}
		for _, dt := range getState(t, d).Guards[0].Policies[i].Details {
			m[dt.Name] = dt.Value
		}
		return m
	}
	// A call's event names its policy only: two of one name are not told
	// apart, and neither shows another's quota.
	first, second := figures(0), figures(1)
	assert.NotContains(t, first, "limit", "the 100/min window: %v", first)
	assert.NotContains(t, second, "limit", "the 2/h window: %v", second)
}

// Two keyed limiters of the same name in one chain: each shows the other's
// rejected keys as its own.
func TestSameNamedKeyedLimitersShowNoTopKeys(t *testing.T) {
	d, err := New()
	require.NoError(t, err)
	admit := func() (sluice.Policy, error) { return ratelimit.NewTokenBucket(ratelimit.PerSecond(1000), 1000) }
	outer, err := ratelimit.NewKeyed(func(key string) (sluice.Policy, error) {
		if key == "rejected-by-outer" {
			return refuseAll{}, nil
		}
		return admit()
	}) // "ratelimit/keyed"
	require.NoError(t, err)
	inner, err := ratelimit.NewKeyed(func(key string) (sluice.Policy, error) {
		if key == "rejected-by-inner" {
			return refuseAll{}, nil
		}
		return admit()
	}) // "ratelimit/keyed"
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("g"), sluice.With(outer, inner), sluice.WithObserver(d))
	require.NoError(t, err)
	defer g.Close()
	ok := func(context.Context) error { return nil }
	require.Error(t, g.Do(sluice.WithKey(context.Background(), "rejected-by-outer"), ok))
	require.Error(t, g.Do(sluice.WithKey(context.Background(), "rejected-by-inner"), ok))

	ps := getState(t, d).Guards[0].Policies
	assert.Equal(t, uint64(1), ps[0].Rejected["rate-limited"])
	assert.Equal(t, uint64(1), ps[1].Rejected["rate-limited"])
	assert.Empty(t, ps[0].TopKeys, "outer: not the inner one's keys")
	assert.Empty(t, ps[1].TopKeys, "inner: not the outer one's keys")
}

// What a Dashboard heard of Redis limiters goes with their Guards (a
// limiter per tenant, say), and never shows beside another policy of the
// same name, Redis limiter or not.
func TestRedisNotesGoWithTheirGuards(t *testing.T) {
	d, err := New()
	require.NoError(t, err)
	for i := range 1000 {
		name := fmt.Sprint("tenant-", i)
		tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 10, ratelimit.WithName(name))
		require.NoError(t, err)
		g, err := sluice.New(sluice.WithName(name), sluice.With(tb), sluice.WithObserver(d))
		require.NoError(t, err)
		redisnote.Record(d, redisnote.Note{Limiter: tb, Err: errors.New("connection refused"), At: time.Now()})
		require.NoError(t, g.Close())
	}
	require.Empty(t, getState(t, d).Guards)
	d.mu.Lock()
	kept := len(d.redis)
	d.mu.Unlock()
	assert.Zero(t, kept, "Redis notes kept for Guards long closed")

	// A new Guard's token bucket (no Redis limiter) named like one of
	// them shows that old Redis error as its own.
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 10, ratelimit.WithName("tenant-7"))
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("local"), sluice.With(tb), sluice.WithObserver(d))
	require.NoError(t, err)
	defer g.Close()
	for _, dt := range getState(t, d).Guards[0].Policies[0].Details {
		assert.NotEqual(t, "last Redis error", dt.Name, "a local token bucket shows a Redis error: %v", dt)
	}
}

// A breaker group's members report their state changes through the group:
// the row of the group shows the state of whichever member changed last,
// "closed", while another member is held open and rejecting.
func TestBreakerGroupRowIsNotAMembersState(t *testing.T) {
	d, err := New()
	require.NoError(t, err)
	keyOf := func(ctx context.Context) string { k, _ := sluice.KeyFrom(ctx); return k }
	grp, err := breaker.NewGroup("per-host", breaker.WithKeyFunc(keyOf))
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("g"), sluice.With(grp), sluice.WithObserver(d))
	require.NoError(t, err)
	defer g.Close()
	ok := func(context.Context) error { return nil }
	for _, k := range []string{"a", "b"} {
		require.NoError(t, g.Do(sluice.WithKey(context.Background(), k), ok))
	}
	a, _ := grp.Get("a")
	b, _ := grp.Get("b")
	a.ForceOpen()
	b.ForceOpen()
	b.ForceClose()
	require.ErrorIs(t, g.Do(sluice.WithKey(context.Background(), "a"), ok), sluice.ErrCircuitOpen)

	p := getState(t, d).Guards[0].Policies[0]
	assert.NotEqual(t, "closed", p.State, "the group's row while member a is open and rejecting: %+v", p)
}

// A limiter's "reset in" is the time until its quota is whole as of its
// last call: ten minutes after the last call to a one-minute window, the
// page still counts down from a minute.
func TestQuotaResetCountsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, err := New()
		require.NoError(t, err)
		fixed, err := ratelimit.NewFixedWindow(5, time.Minute, ratelimit.WithName("fixed"))
		require.NoError(t, err)
		g, err := sluice.New(sluice.WithName("g"), sluice.With(fixed), sluice.WithObserver(d))
		require.NoError(t, err)
		defer g.Close()
		require.NoError(t, g.Do(context.Background(), func(context.Context) error { return nil }))
		time.Sleep(10 * time.Minute)
		for _, dt := range getState(t, d).Guards[0].Policies[0].Details {
			if dt.Name == "reset in" {
				reset, err := time.ParseDuration(dt.Value)
				require.NoError(t, err)
				assert.Zero(t, reset, "the window ended 9 minutes ago; shown: reset in %s", dt.Value)
			}
		}
	})
}

// Without an authorizer api/action answers 403 Forbidden (package doc);
// a POST whose form does not parse gets 400.
func TestActionsOffAre403WhateverTheForm(t *testing.T) {
	d, err := New()
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, "/debug/sluice/api/action", strings.NewReader("action=%zz"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
}

// A New that fails on a duplicate switch has subscribed the Dashboard it
// drops to the switches before: each failed New is kept alive by them.
func TestAFailedNewLeavesNoSubscription(t *testing.T) {
	a, err := degrade.NewSwitch("a")
	require.NoError(t, err)
	b, err := degrade.NewSwitch("b")
	require.NoError(t, err)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 500 {
		_, err := New(WithSwitches(a, b, a))
		require.Error(t, err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	assert.Less(t, grown, int64(2<<20), "heap grew by %d bytes over 500 failed News", grown)
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
}

// A breaker group keys its breakers by the call's resource (by default),
// not by the client key: its row shows, as the keys it rejects most, the
// clients' keys, which it never keyed by.
func TestBreakerGroupShowsNoClientKeys(t *testing.T) {
	d, err := New()
	require.NoError(t, err)
	grp, err := breaker.NewGroup("per-host") // keyed by sluice.ResourceFrom
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("g"), sluice.With(grp), sluice.WithObserver(d))
	require.NoError(t, err)
	defer g.Close()
	ctx := sluice.WithKey(sluice.WithResource(context.Background(), "payments-api"), "client-10.0.0.5")
	ok := func(context.Context) error { return nil }
	require.NoError(t, g.Do(ctx, ok))
	br, found := grp.Get("payments-api")
	require.True(t, found)
	br.ForceOpen()
	require.ErrorIs(t, g.Do(ctx, ok), sluice.ErrCircuitOpen)

	p := getState(t, d).Guards[0].Policies[0]
	for _, k := range p.TopKeys {
		assert.NotEqual(t, "client-10.0.0.5", k.Key, "the group's top rejected keys: %v", p.TopKeys)
	}
}

// The snapshot is bounded whatever the traffic (package doc) in keys, not
// in bytes: ten clients with long keys (a header's value: up to a MiB by
// net/http's default) make every snapshot megabytes long, and the
// Dashboard keeps up to 1024 such keys per keyed limiter.
func TestLongKeysAreShortened(t *testing.T) {
	d, err := New()
	require.NoError(t, err)
	k, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) { return refuseAll{}, nil })
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("g"), sluice.With(k), sluice.WithObserver(d))
	require.NoError(t, err)
	defer g.Close()
	for i := range topN {
		key := fmt.Sprint(i) + strings.Repeat("k", 256<<10)
		_ = g.Do(sluice.WithKey(context.Background(), key), func(context.Context) error { return nil })
	}
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/state", nil))
	assert.Less(t, rec.Body.Len(), 256<<10, "a snapshot of one Guard of one policy")
}

// A name given to WithHosts with its trailing dot is the same name.
func TestWithHostsTakesATrailingDot(t *testing.T) {
	d, err := New(WithHosts("dash.example."))
	require.NoError(t, err)
	for _, h := range []string{"dash.example.", "dash.example.:8080", "dash.example", "DASH.example:8080"} {
		assert.True(t, d.hostAllowed(h), h)
	}
	assert.False(t, d.hostAllowed("evil.example"))
	_, err = New(WithHosts("."))
	assert.Error(t, err)
}
