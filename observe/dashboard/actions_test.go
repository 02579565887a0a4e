package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/ratelimit"
	"github.com/sluice-go/sluice/rules"
)

// actOn posts action a on the Guard named guard, its policy at index
// policy ("" for the Guard as a whole), with value v, from the page.
func actOn(t *testing.T, d *Dashboard, guard, policy, a, v string) (int, string) {
	t.Helper()
	name := "" // the policy's name, as the page shows it
	if i, err := strconv.Atoi(policy); err == nil {
		for _, g := range getState(t, d).Guards {
			if g.Name == guard && i >= 0 && i < len(g.Policies) {
				name = g.Policies[i].Name
			}
		}
	}
	rec := post(d, url.Values{"token": {pageToken(t, d)}, "guard": {guard}, "policy": {policy}, "name": {name}, "action": {a}, "value": {v}},
		"Sec-Fetch-Site", "same-origin")
	var r struct{ Text string }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &r))
	return rec.Code, r.Text
}

// A Guard in shadow mode as a whole is made to enforce as a whole: the page
// offers the action on the Guard; "enforce" on one of its policies, which
// would leave it letting every call through, is an error that says so.
func TestAGuardInShadowModeIsEnforcedAsAWhole(t *testing.T) {
	f := newFixture(t, WithAuthorizer(func(*http.Request) bool { return true }), WithHosts("dash.test"))
	code, _ := actOn(t, f.d, "pay", "", "shadow", "")
	require.Equal(t, http.StatusOK, code)
	st := getState(t, f.d).Guards[0]
	require.True(t, st.Shadowed)
	assert.Equal(t, []string{"shadow", "enforce"}, st.Actions)
	code, text := actOn(t, f.d, "pay", "1", "enforce", "")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, text, "shadow mode as a whole")
	code, _ = actOn(t, f.d, "pay", "", "enforce", "")
	require.Equal(t, http.StatusOK, code)
	st = getState(t, f.d).Guards[0]
	assert.False(t, st.Shadowed)
	assert.False(t, st.Policies[1].Shadowed)
	code, _ = actOn(t, f.d, "pay", "", "reset", "")
	assert.Equal(t, http.StatusBadRequest, code, "a Guard takes no other action")
}

// A breaker forced closed from the page (or anywhere) shows as held: its
// protection is off until a reset, however many failures in a row.
func TestABreakerHeldByHandShowsAsHeld(t *testing.T) {
	f := newFixture(t, WithAuthorizer(func(*http.Request) bool { return true }), WithHosts("dash.test"))
	code, _ := actOn(t, f.d, "pay", "3", "close", "")
	require.Equal(t, http.StatusOK, code)
	for i := range 10 { // past its threshold of 3 in a row
		ctx := sluice.WithKey(context.Background(), fmt.Sprint("client-", i))
		require.ErrorIs(t, f.g.Do(ctx, func(context.Context) error { return errDown }), errDown)
	}
	p := getState(t, f.d).Guards[0].Policies[3]
	assert.Equal(t, "held closed", p.State)
	assert.Contains(t, p.Details, detail{"held", "by hand: reset to let it trip and close again"})
	code, _ = actOn(t, f.d, "pay", "3", "reset", "")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "closed", getState(t, f.d).Guards[0].Policies[3].State)
}

// A switch pinned from the page is handed back to its Auto from the page.
func TestAPinnedSwitchIsUnpinnedFromThePage(t *testing.T) {
	sw, err := degrade.NewSwitch("recommendations")
	require.NoError(t, err)
	d, err := New(WithAuthorizer(func(*http.Request) bool { return true }), WithSwitches(sw), WithHosts("dash.test"))
	require.NoError(t, err)
	act := func(a string) int {
		return post(d, url.Values{"token": {pageToken(t, d)}, "switch": {"recommendations"}, "action": {a}}).Code
	}
	require.Equal(t, http.StatusOK, act("off"))
	require.True(t, sw.Pinned())
	require.Equal(t, http.StatusOK, act("auto"))
	assert.False(t, sw.Pinned())
}

// tunable is a policy with a token bucket's methods, which the page
// retunes alike, whose Burst gives way to other goroutines between its read
// and the caller's SetLimit, as a descheduled one may.
type tunable struct {
	mu    sync.Mutex
	rate  ratelimit.Rate
	burst int64
}

func (*tunable) Name() string { return "tunable" }
func (*tunable) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	return 0, sluice.Quota{Limit: -1}, nil
}
func (*tunable) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}
func (*tunable) Needs() sluice.Needs                                              { return 0 }
func (p *tunable) Tokens() float64                                                { return 0 }
func (p *tunable) Rate() ratelimit.Rate {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rate
}
func (p *tunable) Burst() int64 {
	p.mu.Lock()
	b := p.burst
	p.mu.Unlock()
	time.Sleep(time.Millisecond) // the other action runs meanwhile, unless it waits
	return b
}
func (p *tunable) SetLimit(r ratelimit.Rate, burst int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rate, p.burst = r, burst
	return nil
}

// "rate" and "burst" each read the other number and write both: taken at
// once, neither undoes the other.
func TestRateAndBurstActionsAtOnceBothHold(t *testing.T) {
	d, err := New(WithAuthorizer(func(*http.Request) bool { return true }), WithHosts("dash.test"))
	require.NoError(t, err)
	p := &tunable{rate: ratelimit.PerSecond(100), burst: 100}
	g, err := sluice.New(sluice.WithName("g"), sluice.With(p), sluice.WithObserver(d))
	require.NoError(t, err)
	defer g.Close()
	for i := range 20 {
		rate, burst := int64(50+i), int64(10+i)
		var wg sync.WaitGroup
		wg.Go(func() {
			code, _ := actOn(t, d, "g", "0", "rate", fmt.Sprint(rate))
			assert.Equal(t, http.StatusOK, code)
		})
		wg.Go(func() {
			code, _ := actOn(t, d, "g", "0", "burst", fmt.Sprint(burst))
			assert.Equal(t, http.StatusOK, code)
		})
		wg.Wait()
		require.Equal(t, ratelimit.PerSecond(rate), p.Rate(), "round %d", i)
		p.mu.Lock()
		require.Equal(t, burst, p.burst, "round %d", i)
		p.mu.Unlock()
	}
}

// refuseNextAttach is an Observer whose next Attach fails once armed: a
// rules load fails after closing the Guard it rebuilds, which the loader
// makes again with its counts (guardhook.Carry).
type refuseNextAttach struct{ armed *atomic.Bool }

func (r refuseNextAttach) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	if r.armed.CompareAndSwap(true, false) {
		return nil, nil, errors.New("refused")
	}
	return nil, nil, nil
}

// A Guard made again by a failed load takes its predecessor's counts,
// fallbacks included, and the page has already shown those fallbacks as an
// event: it must not show them again as if just answered.
func TestAGuardMadeAgainShowsNoFallbacksTwice(t *testing.T) {
	d, err := New()
	require.NoError(t, err)
	fb, err := degrade.New(degrade.OnError(degrade.Value(struct{}{})))
	require.NoError(t, err)
	var refuse atomic.Bool
	path := filepath.Join(t.TempDir(), "rules.yaml")
	v1 := "guards:\n  api:\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 1000/s, burst: 1000}\ndefault: api\n"
	require.NoError(t, os.WriteFile(path, []byte(v1), 0o644))
	l, err := rules.New(path, rules.WithGuardOptions(func(string) []sluice.Option {
		return []sluice.Option{sluice.WithObserver(d), sluice.WithObserver(refuseNextAttach{&refuse}), sluice.WithFallback(fb)}
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	g, _ := l.Guard("api")
	for range 2 {
		require.NoError(t, g.Do(context.Background(), func(context.Context) error { return errDown }))
	}
	fallbackEvents := func() int {
		n := 0
		for _, e := range getState(t, d).Events {
			if e.Kind == "fallback" {
				n += max(e.Times, 1) // a repeated event shows once, "(×2)"
			}
		}
		return n
	}
	require.Equal(t, 1, fallbackEvents(), "2 answered by a fallback")

	v2 := strings.Replace(v1, "default:", "      - {name: other, kind: token-bucket, rate: 1000/s, burst: 1000}\ndefault:", 1)
	require.NoError(t, os.WriteFile(path, []byte(v2), 0o644))
	refuse.Store(true)
	require.Error(t, l.Reload())
	g2, _ := l.Guard("api")
	require.NotSame(t, g, g2)
	assert.Equal(t, 1, fallbackEvents(), "no fallback answered since: %+v", getState(t, d).Events)
}

// "Every action, taken or refused, is logged through slog, counted and
// shown in the event list" (package doc): an action attempted by GET (a
// link or an <img> on another site probing the endpoint) too.
func TestAnActionRefusedForItsMethodIsCounted(t *testing.T) {
	d, err := New(WithAuthorizer(func(*http.Request) bool { return true }))
	if err != nil {
		t.Fatal(err)
	}
	q := url.Values{"action": {"open"}, "guard": {"g"}, "policy": {"0"}}
	r, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/debug/sluice/api/action?"+q.Encode(), nil)
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, r)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET api/action: %d, want 405", rec.Code)
	}
	s := d.snapshot(time.Now())
	if s.Actions.Refused != 1 {
		t.Errorf("refused actions counted = %d, want 1", s.Actions.Refused)
	}
	found := false
	for _, e := range s.Events {
		if e.Kind == "refused" {
			found = true
		}
	}
	if !found {
		t.Errorf("no refused event shown for the GET action: %+v", s.Events)
	}
}

// An action tried by GET is a refusal, but what its query string names is
// no part of it (nothing bounds it but the server's header limit, 1 MB): a
// cross-site <img> must not put a megabyte in each of the ten refused
// events kept, which every open page's stream carries once a second.
func TestAGETRefusalDoesNotBloatTheSnapshot(t *testing.T) {
	d, err := New(WithAuthorizer(func(*http.Request) bool { return true }), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		q := url.Values{"action": {"open"}, "guard": {strings.Repeat("g", 100<<10) + strconv.Itoa(i)}}
		r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/debug/sluice/api/action?"+q.Encode(), nil)
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, r)
		if rec.Code != http.StatusMethodNotAllowed {
			t.Fatalf("GET api/action: %d, want 405", rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/sluice/api/state", nil))
	if n := rec.Body.Len(); n > 64<<10 {
		t.Errorf("after 10 GETs of api/action with 100 KiB queries, the snapshot every page streams each second is %d bytes; want it bounded (< 64 KiB) as a POST's 4 KiB form bounds it", n)
	}
}
