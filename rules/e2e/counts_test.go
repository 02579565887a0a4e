package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
	"github.com/sluice-go/sluice/observe/dashboard"
	"github.com/sluice-go/sluice/observe/prommetrics"
	"github.com/sluice-go/sluice/rules"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// refuser refuses the next Attach while armed.
type refuser struct{ armed *atomic.Bool }

func (r refuser) Attach(*sluice.Guard) (func(context.Context, sluice.CallEvent), func(), error) {
	if r.armed.CompareAndSwap(true, false) {
		return nil, nil, errors.New("refused")
	}
	return nil, nil, nil
}

type rig struct {
	t       *testing.T
	path    string
	l       *rules.Loader
	h       http.Handler
	dash    *dashboard.Dashboard
	scrapeH http.Handler
	refuse  atomic.Bool
	retry   atomic.Bool // the options give WithRetry: the middleware refuses
	guards  []*sluice.Guard

	mu       sync.Mutex
	made     int
	statuses map[int]int
	hold     chan struct{}
	started  chan struct{}
}

func newRig(t *testing.T, file string) *rig {
	r := &rig{t: t, statuses: map[int]int{}}
	r.path = filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(r.path, []byte(file), 0o644))
	m, ph, err := prommetrics.New()
	require.NoError(t, err)
	r.scrapeH = ph
	d, err := dashboard.New(dashboard.WithLogger(quiet))
	require.NoError(t, err)
	r.dash = d
	r.l, err = rules.New(r.path, rules.WithLogger(quiet), rules.WithGuardOptions(func(string) []sluice.Option {
		o := []sluice.Option{sluice.WithObserver(m), sluice.WithObserver(d), sluice.WithObserver(refuser{&r.refuse})}
		if r.retry.Load() {
			o = append(o, sluice.WithRetry(sluice.Retry{}))
		}
		return o
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.l.Close() })
	mw, err := r.l.HTTP()
	require.NoError(t, err)
	r.h = mw(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("X-Hold") != "" {
			r.started <- struct{}{}
			<-r.hold
		}
		w.WriteHeader(http.StatusOK)
	}))
	r.noteGuard()
	return r
}

func (r *rig) noteGuard() {
	g, ok := r.l.Guard("api")
	require.True(r.t, ok)
	for _, x := range r.guards {
		if x == g {
			return
		}
	}
	r.guards = append(r.guards, g)
}

func (r *rig) serve(hold bool) {
	req := httptest.NewRequest(http.MethodGet, "/items", nil)
	if hold {
		req.Header.Set("X-Hold", "1")
	}
	rec := httptest.NewRecorder()
	r.h.ServeHTTP(rec, req)
	r.mu.Lock()
	r.made++
	r.statuses[rec.Code]++
	r.mu.Unlock()
}

// burst runs n requests on each of 2 goroutines while fn runs.
func (r *rig) burst(n int, fn func()) {
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range n {
				r.serve(false)
			}
		})
	}
	fn()
	wg.Wait()
	r.noteGuard()
}

// write writes the file and reloads it; wantErr says whether the load must fail.
func (r *rig) write(file string, wantErr bool) {
	require.NoError(r.t, os.WriteFile(r.path, []byte(file), 0o644))
	err := r.l.Reload()
	if wantErr {
		require.Error(r.t, err)
	} else {
		require.NoError(r.t, err)
	}
}

// statsTotal sums the calls counted by each Guard that served "api",
// less what each carried from the one before it.
func (r *rig) statsTotal(policy string) (admitted, rejected uint64) {
	for _, g := range r.guards {
		st := g.Stats()
		var c *sluice.Stats
		if x, ok := guardhook.Carried(g).(*sluice.Stats); ok {
			c = x
		}
		for i, ps := range st.Policies {
			if ps.Policy != policy {
				continue
			}
			admitted += ps.Admitted
			for _, n := range ps.Rejected {
				rejected += n
			}
			if c != nil && i < len(c.Policies) && c.Policies[i].Policy == policy {
				admitted -= c.Policies[i].Admitted
				for _, n := range c.Policies[i].Rejected {
					rejected -= n
				}
			}
		}
	}
	return
}

func (r *rig) promTotal(policy string) (admitted, rejected float64) {
	rec := httptest.NewRecorder()
	r.scrapeH.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(r.t, http.StatusOK, rec.Code)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(rec.Body)
	require.NoError(r.t, err)
	fam := fams["sluice_requests_total"]
	require.NotNil(r.t, fam, "no sluice_requests_total")
	for _, m := range fam.GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if l["sluice_guard"] != "api" || l["sluice_policy"] != policy {
			continue
		}
		v := counterValue(m)
		switch l["sluice_result"] {
		case "admitted":
			admitted += v
		case "rejected":
			rejected += v
		}
	}
	return
}

func counterValue(m *dto.Metric) float64 { return m.GetCounter().GetValue() }

type dashState struct {
	Guards []struct {
		Name     string            `json:"name"`
		Admitted uint64            `json:"admitted"`
		Rejected map[string]uint64 `json:"rejected"`
		Policies []struct {
			Name     string            `json:"name"`
			Admitted uint64            `json:"admitted"`
			Rejected map[string]uint64 `json:"rejected"`
			Inflight uint64            `json:"inflight"`
		} `json:"policies"`
	} `json:"guards"`
}

func (r *rig) dashTotal(policy string) (gAdm, gRej, pAdm, pRej, inflight uint64) {
	rec := httptest.NewRecorder()
	r.dash.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/sluice/api/state", nil))
	require.Equal(r.t, http.StatusOK, rec.Code)
	var s dashState
	require.NoError(r.t, json.Unmarshal(rec.Body.Bytes(), &s))
	for _, g := range s.Guards {
		if g.Name != "api" {
			continue
		}
		gAdm = g.Admitted
		for _, n := range g.Rejected {
			gRej += n
		}
		for _, p := range g.Policies {
			inflight += p.Inflight
			if p.Name != policy {
				continue
			}
			pAdm = p.Admitted
			for _, n := range p.Rejected {
				pRej += n
			}
		}
	}
	return
}

// heldAcross starts a request that is held in the handler, runs fn, then
// lets it end.
func (r *rig) heldAcross(fn func()) {
	r.hold = make(chan struct{})
	r.started = make(chan struct{})
	done := make(chan struct{})
	go func() { r.serve(true); close(done) }()
	select {
	case <-r.started:
	case <-done: // rejected
	}
	fn()
	close(r.hold)
	<-done
}

func (r *rig) check(label string) {
	t := r.t
	r.mu.Lock()
	made := uint64(r.made)
	statuses := map[int]int{}
	for k, v := range r.statuses {
		statuses[k] = v
	}
	r.mu.Unlock()
	var ok, rej uint64
	for code, n := range statuses {
		if code == http.StatusOK {
			ok += uint64(n)
		} else {
			rej += uint64(n)
		}
	}
	sa, sr := r.statsTotal("bucket")
	pa, pr := r.promTotal("bucket")
	ga, gr, da, dr, inflight := r.dashTotal("bucket")
	t.Logf("%s: made %d (%v); stats %d+%d; prom %v+%v; dash guard %d+%d bucket %d+%d inflight %d",
		label, made, statuses, sa, sr, pa, pr, ga, gr, da, dr, inflight)
	require.Equal(t, made, sa+sr, "%s: the Guards' Stats count every request once", label)
	require.Equal(t, float64(made), pa+pr, "%s: sluice.requests{policy=bucket} counts every request once", label)
	require.Equal(t, made, da+dr, "%s: the dashboard's bucket counts every request once", label)
	require.Equal(t, made, ga+gr, "%s: the dashboard's guard counts every request once", label)
	require.Equal(t, ok, ga, "%s: the dashboard's guard admitted = the 200s", label)
	require.Zero(t, inflight, "%s: no call in flight", label)
}

const (
	w1 = "guards:\n  api:\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 1/h, burst: 200}\n      - {name: pool, kind: bulkhead, limit: 50}\ndefault: api\n"
	w2 = "guards:\n  api:\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 1/h, burst: 150}\n      - {name: pool, kind: bulkhead, limit: 40}\ndefault: api\n"
	w3 = "guards:\n  api:\n    timeout: 5s\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 1/h, burst: 150}\n      - {name: pool, kind: bulkhead, limit: 40}\ndefault: api\n"
	w4 = "guards:\n  api:\n    timeout: 5s\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 1/h, burst: 150}\n      - {name: pool, kind: bulkhead, limit: 40, queue: 10, max_wait: 1s}\ndefault: api\n"
	w5 = "guards:\n  api:\n    timeout: 4s\n    policies:\n      - {name: bucket, kind: token-bucket, rate: 1/h, burst: 150}\n      - {name: pool, kind: bulkhead, limit: 40, queue: 10, max_wait: 1s}\ndefault: api\n"
)

// Requests through a Loader's middleware while its file is reloaded (in
// place, a guard rebuilt, a bulkhead made anew, loads an observer or the
// middleware refuses), a request held across each: afterwards the Guards'
// Stats, a Prometheus scrape and the dashboard each count every request
// made, once.
func TestCountsAgreeAcrossReloads(t *testing.T) {
	steps := []struct {
		name                   string
		file                   string
		refuse, retry, wantErr bool
	}{
		{"in place", w2, false, false, false},
		{"timeout added", w3, false, false, false},
		{"bulkhead made anew", w4, false, false, false},
		{"observer refuses", w5, true, false, true},
		{"middleware refuses", w5, false, true, true},
		{"then loads", w5, false, false, false},
	}
	for range 3 {
		r := newRig(t, w1)
		r.burst(10, func() {})
		for _, s := range steps {
			r.heldAcross(func() {
				r.burst(15, func() {
					r.refuse.Store(s.refuse)
					r.retry.Store(s.retry)
					r.write(s.file, s.wantErr)
					r.refuse.Store(false)
					r.retry.Store(false)
				})
			})
			r.burst(5, func() {})
			r.check(s.name)
		}
	}
}
