package redisdash_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/redistest"
	"github.com/sluice-go/sluice/observe/dashboard"
	"github.com/sluice-go/sluice/observe/dashboard/redisdash"
	redislimit "github.com/sluice-go/sluice/ratelimit/redis"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestObserverShowsTheFailurePolicyAndRedissLastError(t *testing.T) {
	_, err := redisdash.Observer(nil)
	require.Error(t, err)

	d, err := dashboard.New()
	require.NoError(t, err)
	obs, err := redisdash.Observer(d)
	require.NoError(t, err)
	client := redis.NewClient(&redis.Options{Addr: redistest.DeadAddr(t), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	lim, err := redislimit.NewFixedWindow(client, 10, time.Minute, redislimit.WithName("shared"),
		redislimit.WithFailClosed(), redislimit.WithTimeout(time.Second), redislimit.WithObserver(obs))
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("api"), sluice.With(lim), sluice.WithObserver(d))
	require.NoError(t, err)
	defer g.Close()

	for range 2 {
		err = g.Do(context.Background(), func(context.Context) error { return nil })
		require.ErrorIs(t, err, redislimit.ErrUnavailable, "Redis is down: fail closed")
	}

	all := firstPolicyFigures(t, d)
	require.Len(t, all, 1)
	figures := all["api"]
	assert.Equal(t, "fail-closed: 2 decisions, the last 0s ago", figures["failure policy"])
	assert.True(t, strings.Contains(figures["last Redis error"], "connection refused"), figures["last Redis error"])
}

// Two Redis limiters of one name (each route's with its default name, say)
// each show only what their own observer heard: one failing closed does
// not show on the other, which Redis never failed.
func TestSameNamedLimitersShowTheirOwnFailures(t *testing.T) {
	d, err := dashboard.New()
	require.NoError(t, err)
	obs, err := redisdash.Observer(d)
	require.NoError(t, err)
	down := redis.NewClient(&redis.Options{Addr: redistest.DeadAddr(t), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer down.Close()
	sick, err := redislimit.NewFixedWindow(down, 10, time.Minute, redislimit.WithName("shared"),
		redislimit.WithFailClosed(), redislimit.WithTimeout(time.Second), redislimit.WithObserver(obs))
	require.NoError(t, err)
	other, err := redislimit.NewFixedWindow(down, 10, time.Minute, redislimit.WithName("shared"),
		redislimit.WithFailClosed(), redislimit.WithTimeout(time.Second), redislimit.WithObserver(obs))
	require.NoError(t, err)
	g1, err := sluice.New(sluice.WithName("orders"), sluice.With(sick), sluice.WithObserver(d))
	require.NoError(t, err)
	defer g1.Close()
	g2, err := sluice.New(sluice.WithName("users"), sluice.With(other), sluice.WithObserver(d))
	require.NoError(t, err)
	defer g2.Close()

	err = g1.Do(context.Background(), func(context.Context) error { return nil })
	require.ErrorIs(t, err, redislimit.ErrUnavailable)

	figures := firstPolicyFigures(t, d)
	require.Len(t, figures, 2)
	assert.Equal(t, "fail-closed: 1 decisions, the last 0s ago", figures["orders"]["failure policy"])
	assert.Empty(t, figures["users"]["failure policy"], "users: its limiter never failed")
	assert.Empty(t, figures["users"]["last Redis error"], "users: its limiter never failed")
}

// firstPolicyFigures returns the figures the page shows of the first
// policy of each Guard, by the Guard's name.
func firstPolicyFigures(t *testing.T, d *dashboard.Dashboard) map[string]map[string]string {
	t.Helper()
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/state", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	var s struct {
		Guards []struct {
			Name     string
			Policies []struct {
				Details []struct{ Name, Value string }
			}
		}
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &s))
	out := map[string]map[string]string{}
	for _, gv := range s.Guards {
		figures := map[string]string{}
		for _, dt := range gv.Policies[0].Details {
			figures[dt.Name] = dt.Value
		}
		out[gv.Name] = figures
	}
	return out
}

// An All's failure policy shows as its members name it, whatever colons
// their names hold ("api:users" decides as "api:users:closed"):
// "fail-closed", not "users:closed".
func TestAllOfMembersNamedWithColonsShowsItsFailurePolicy(t *testing.T) {
	d, err := dashboard.New()
	require.NoError(t, err)
	obs, err := redisdash.Observer(d)
	require.NoError(t, err)
	client := redis.NewClient(&redis.Options{Addr: redistest.DeadAddr(t), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	users, err := redislimit.NewFixedWindow(client, 10, time.Minute, redislimit.WithName("api:users"), redislimit.WithFailClosed())
	require.NoError(t, err)
	orders, err := redislimit.NewFixedWindow(client, 10, time.Minute, redislimit.WithName("api:orders"), redislimit.WithFailClosed())
	require.NoError(t, err)
	all, err := redislimit.All([]*redislimit.Limiter{users, orders}, redislimit.WithName("api"),
		redislimit.WithTimeout(time.Second), redislimit.WithObserver(obs))
	require.NoError(t, err)
	g, err := sluice.New(sluice.WithName("api"), sluice.With(all), sluice.WithObserver(d))
	require.NoError(t, err)
	defer g.Close()

	err = g.Do(context.Background(), func(context.Context) error { return nil })
	require.ErrorIs(t, err, redislimit.ErrUnavailable)

	assert.Equal(t, "fail-closed: 1 decisions, the last 0s ago", firstPolicyFigures(t, d)["api"]["failure policy"])
}
