package dashboard

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/internal/breakerview"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/internal/policywindow"
	"github.com/sluice-go/sluice/ratelimit"
)

// The policies a Dashboard reads, by what they offer: a policy of a user's
// that offers the same methods is shown alike.
type (
	breakerState interface {
		State() breaker.State
		Counts() breaker.Counts
	}
	forcer interface {
		ForceOpen()
		ForceClose()
		Reset()
	}
	bucket interface {
		Rate() ratelimit.Rate
		Burst() int64
		Tokens() float64
	}
	retuner interface {
		Rate() ratelimit.Rate
		Burst() int64
		SetLimit(r ratelimit.Rate, burst int64) error
	}
	keyed       interface{ Len() int }
	concurrency interface{ Stats() adaptive.Stats }
)

// state is the snapshot the page draws, at api/state and on each event of
// api/events.
type state struct {
	Time     time.Time    `json:"time"`
	Guards   []guardView  `json:"guards"`
	Switches []switchView `json:"switches,omitempty"`
	Chart    chart        `json:"chart"`
	Events   []event      `json:"events"`
	Rules    *rulesView   `json:"rules,omitempty"`
	Actions  actionsView  `json:"actions"`
}

type guardView struct {
	Name     string            `json:"name"`
	Admitted uint64            `json:"admitted"` // by every policy
	Rejected map[string]uint64 `json:"rejected"` // by cause, by any policy
	// Fallbacks counts the calls a fallback answered.
	Fallbacks uint64 `json:"fallbacks"`
	// Retries and BudgetRefusals are, for a Guard that retries
	// (sluice.WithRetry), the retries it granted and those its budget
	// refused.
	Retries        uint64 `json:"retries,omitempty"`
	BudgetRefusals uint64 `json:"budgetRefusals,omitempty"`
	// Shadowed is true while the whole Guard is in shadow mode.
	Shadowed bool         `json:"shadowed"`
	Policies []policyView `json:"policies"`
	// Actions are the admin actions the Guard as a whole takes: "shadow"
	// and "enforce"; none without an authorizer.
	Actions []string `json:"actions,omitempty"`
}

type policyView struct {
	Name     string            `json:"name"`
	Kind     string            `json:"kind"` // the policy's Go type: "breaker.Breaker"
	State    string            `json:"state,omitempty"`
	Admitted uint64            `json:"admitted"`
	Rejected map[string]uint64 `json:"rejected"` // by cause
	Inflight uint64            `json:"inflight"`
	// ShadowRejected counts the calls the policy rejected in shadow mode
	// and let through.
	ShadowRejected uint64 `json:"shadowRejected"`
	// Shadowed is true while the policy is in shadow mode.
	Shadowed bool `json:"shadowed"`
	// Details are the figures that the policy's kind has, in order.
	Details []detail `json:"details,omitempty"`
	// TopKeys are a keyed limiter's keys with the most rejections.
	TopKeys []keyCount `json:"topKeys,omitempty"`
	// Actions are the admin actions the policy takes: "open", "close",
	// "reset", "rate", "burst", "shadow" and "enforce"; none without an
	// authorizer.
	Actions []string `json:"actions,omitempty"`
}

type detail struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type switchView struct {
	Name   string `json:"name"`
	On     bool   `json:"on"`
	Pinned bool   `json:"pinned"`
}

type rulesView struct {
	Version string    `json:"version"`
	Loaded  time.Time `json:"loaded"`
	Error   string    `json:"error,omitempty"`
}

type actionsView struct {
	Enabled bool   `json:"enabled"`
	Done    uint64 `json:"done"`
	Refused uint64 `json:"refused"`
}

// snapshot reads everything the page shows, at now.
func (d *Dashboard) snapshot(now time.Time) state {
	s := state{Time: now, Chart: d.series.chart()}
	s.Actions = actionsView{Enabled: d.authorize != nil, Done: d.actionsDone.Load(), Refused: d.actionsRefused.Load()}
	d.mu.Lock()
	guards := append([]*guardWatch(nil), d.guards...)
	d.mu.Unlock()
	s.Guards = make([]guardView, 0, len(guards))
	for _, w := range guards {
		s.Guards = append(s.Guards, d.guardView(w, now))
	}
	for _, sw := range d.switches {
		s.Switches = append(s.Switches, switchView{Name: sw.Name(), On: sw.On(), Pinned: sw.Pinned()})
	}
	if d.rules != nil {
		s.Rules = d.rulesView(now)
	}
	s.Events = d.events.last()
	return s
}

func (d *Dashboard) guardView(w *guardWatch, now time.Time) guardView {
	st := w.stats()
	v := guardView{Name: w.name, Rejected: map[string]uint64{}, Shadowed: st.Shadowed,
		Retries: st.Retries, BudgetRefusals: st.BudgetRefusals,
		Policies: make([]policyView, len(w.policies))}
	if d.authorize != nil {
		v.Actions = []string{"shadow", "enforce"}
	}
	v.Admitted = st.admitted
	for c, n := range st.rejected {
		if n > 0 {
			v.Rejected[causes[c]] = n
		}
	}
	d.fallbackEvents(w, st.Fallbacks[:], now)
	for _, n := range st.Fallbacks {
		v.Fallbacks += n
	}
	for i, p := range w.policies {
		ps := st.Policies[i]
		pv := policyView{Name: ps.Policy, Kind: kind(p), Admitted: ps.Admitted, Rejected: map[string]uint64{},
			ShadowRejected: ps.ShadowRejected, Shadowed: ps.Shadowed}
		ended := uint64(0)
		for _, n := range ps.Outcomes {
			ended += n
		}
		pv.Inflight = ps.Admitted - min(ended, ps.Admitted)
		for c, n := range ps.Rejected {
			if n > 0 {
				pv.Rejected[causes[c]] = n
			}
		}
		seen := w.state[i].Load()
		if seen != nil {
			pv.State = seen.state
		}
		d.describe(&pv, p)
		describeQuota(&pv, p, w.quota(ps.Policy))
		d.describeRedis(&pv, p, now)
		if seen != nil && pv.State == seen.state {
			pv.Details = append(pv.Details, detail{"for", now.Sub(seen.since).Truncate(time.Second).String()})
		}
		if t := w.keys[ps.Policy]; t != nil {
			pv.TopKeys = t.top()
		}
		v.Policies[i] = pv
	}
	return v
}

// fallbackEvents adds an event for the fallbacks a Guard answered since
// they were last shown.
func (d *Dashboard) fallbackEvents(w *guardWatch, counts []uint64, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w.fallbacks == nil {
		w.fallbacks = make([]uint64, len(counts))
		if c, ok := guardhook.Carried(w.g).(*sluice.Stats); ok {
			// Made again in another's place, with its counts (a rules
			// load undone): their fallbacks were shown already.
			copy(w.fallbacks, c.Fallbacks[:])
		}
	}
	for c, n := range counts {
		if n > w.fallbacks[c] {
			d.events.add(event{Time: now, Kind: "fallback", Guard: w.name,
				Text: fmt.Sprintf("%d answered by a fallback (%s)", n-w.fallbacks[c], causes[c])})
			w.fallbacks[c] = n
		}
	}
}

// kind names p's type without its pointer: "breaker.Breaker".
func kind(p sluice.Policy) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", p), "*")
}

// describe fills in the state, details and actions of p's kind.
func (d *Dashboard) describe(pv *policyView, p sluice.Policy) {
	add := func(name string, format string, args ...any) {
		pv.Details = append(pv.Details, detail{name, fmt.Sprintf(format, args...)})
	}
	switch p := breakerview.Of(p).(type) {
	case breakerState:
		pv.State = p.State().String()
		c := p.Counts()
		add("requests", "%d", c.Requests)
		add("failures", "%d", c.Failures)
		add("in a row", "%d", c.ConsecutiveFailures)
		if c.ProbesAdmitted > 0 {
			add("probes", "%d", c.ProbesAdmitted)
		}
		if c.NextProbe > 0 {
			add("next probe in", "%v", c.NextProbe.Truncate(time.Second))
		}
		if c.Forced {
			// Forced from this page or elsewhere: its protection is off
			// until a reset.
			pv.State = "held " + pv.State
			add("held", "by hand: reset to let it trip and close again")
		}
	case concurrency:
		st := p.Stats()
		pv.State = st.State
		add("limit", "%d", st.Limit)
		add("in flight", "%d", st.Inflight)
		add("queued", "%d", st.Waiting)
		if st.AvgRT > 0 {
			add("avg RT", "%v", st.AvgRT.Round(10*time.Microsecond))
		}
		if d.cpu != nil {
			add("CPU", "%.0f%%", 100*d.cpu())
		}
	case bucket:
		add("rate", "%v", p.Rate())
		add("burst", "%d", p.Burst())
		add("remaining", "%d", int64(max(p.Tokens(), 0)))
	case keyed:
		add("keys", "%d", p.Len())
	}
	if d.authorize == nil {
		return
	}
	if _, ok := p.(forcer); ok {
		pv.Actions = append(pv.Actions, "open", "close", "reset")
	}
	if _, ok := p.(retuner); ok {
		pv.Actions = append(pv.Actions, "rate", "burst")
	}
	pv.Actions = append(pv.Actions, "shadow", "enforce")
}

// describeQuota adds the figures of a limiter that shows none of its own:
// its limit, window and remaining quota as of the last call it decided,
// and the time until its quota is whole. A keyed limiter's quota is per
// key: only its limit and window show.
func describeQuota(pv *policyView, p sluice.Policy, q *quotaSeen) {
	if q == nil || q.limit.Load() == 0 {
		return
	}
	add := func(name, value string) { pv.Details = append(pv.Details, detail{name, value}) }
	_, perKey := p.(keyed)
	if perKey {
		add("limit per key", fmt.Sprint(q.limit.Load()-1))
	} else {
		add("limit", fmt.Sprint(q.limit.Load()-1))
	}
	if w := policywindow.Of(p); w > 0 {
		add("window", w.String())
	}
	if perKey {
		return
	}
	add("remaining", fmt.Sprint(q.remaining.Load()))
	// The time left until the quota is whole, counted down since the call
	// that decided it.
	elapsed := time.Since(time.Unix(0, q.at.Load()))
	if r := time.Duration(q.reset.Load()) - elapsed; r > 0 {
		add("reset in", r.Round(time.Millisecond).String())
	}
}

// rulesView reads the rules' status, and adds an event when it changed
// since it was last shown.
func (d *Dashboard) rulesView(now time.Time) *rulesView {
	// One at a time from the read to the compare: a snapshot that read the
	// status before a reload must not store it after one that read it
	// after, and show the rules rolled back.
	d.rulesMu.Lock()
	defer d.rulesMu.Unlock()
	version, loaded, err := d.rules()
	v := rulesView{Version: version, Loaded: loaded}
	if err != nil {
		v.Error = err.Error()
	}
	d.mu.Lock()
	changed := v != d.rulesSeen
	d.rulesSeen = v
	d.mu.Unlock()
	if changed {
		text := "rules " + version + " in force"
		if v.Error != "" {
			text = "reload failed, rules " + version + " stay in force: " + v.Error
		}
		d.events.add(event{Time: now, Kind: "reload", Text: text})
	}
	return &v
}
