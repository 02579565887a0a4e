package redislimit

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Cluster client routes a key by its map of slots to nodes, which go-redis
// refreshes on a MOVED reply or once the map is older than the client's
// ClusterStateReloadInterval (a minute by default). A master that dies sends
// no MOVED: after its replica takes over, the client keeps sending the slot's
// calls to the dead address until the interval has passed, and the limiters
// decide by their failure policies all that time. So a limiter on a Cluster
// asks the client to reload its map itself (ReloadState) when a call fails in
// a way that can mean the topology moved, and just before and when the
// breaker around Redis lets a probe through; at most once per reloadEvery,
// so a flapping node cannot keep the client reloading.

// reloadEvery is the least time between two reloads of the slot map that a
// limiter asks for. go-redis itself runs one reload at a time and at most
// one per 200 ms.
const reloadEvery = 250 * time.Millisecond

// reloadLead is how long before the breaker's probe the slot map is
// reloaded, at most: the reload must be in when the probe is sent.
const reloadLead = 100 * time.Millisecond

// stateReloader is a client with a slot map to reload: a *redis.ClusterClient
// (which redis.NewUniversalClient returns for several addresses).
type stateReloader interface {
	ReloadState(ctx context.Context)
}

// topology asks a Cluster client to reload its slot map.
type topology struct {
	client stateReloader
	last   atomic.Int64 // wall-clock instant (ns) of the last reload asked for
	now    func() int64 // the wall clock, in ns
}

// newTopology returns the topology of client, or nil when it has no slot map
// (a standalone or Sentinel-managed client).
func newTopology(client redis.UniversalClient) *topology {
	r, ok := client.(stateReloader)
	if !ok {
		return nil
	}
	return &topology{client: r, now: func() int64 { return time.Now().UnixNano() }}
}

// reload asks the client to reload its slot map, unless it was asked less
// than reloadEvery ago. It does not wait for the reload, which go-redis runs
// on a goroutine of its own.
func (t *topology) reload() {
	if t == nil {
		return
	}
	now := t.now()
	last := t.last.Load()
	if last != 0 && now-last < int64(reloadEvery) {
		return
	}
	if t.last.CompareAndSwap(last, now) {
		t.client.ReloadState(context.Background())
	}
}

// failed reloads the slot map when err, a failed call's, can mean that the
// slot's master moved or died.
func (t *topology) failed(err error) {
	if t != nil && topologyMoved(err) {
		t.reload()
	}
}

// breakerChanged reloads the slot map for the breaker around Redis: when it
// goes half-open, and, when it opens for openFor, shortly before its probe,
// so that the probe goes to the slot's master as the Cluster knows it then.
func (t *topology) breakerChanged(to string, openFor time.Duration) {
	if t == nil {
		return
	}
	switch to {
	case "half-open":
		t.reload()
	case "open":
		time.AfterFunc(openFor-min(openFor/4, reloadLead), t.reload)
	}
}

// topologyMoved reports whether a call's failure can mean that the topology
// moved: the connection failed (refused, reset, timed out), or the Cluster
// answered that a slot is down, migrating or served elsewhere. A script's
// own error, a malformed reply or keys in different slots cannot.
func topologyMoved(err error) bool {
	if err == nil || errors.Is(err, errReply) || errors.Is(err, ErrCrossSlot) || errors.Is(err, errLeaderPanicked) {
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true // no reply: a connection's failure or a timeout
	}
	for _, p := range []string{"CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "LOADING", "READONLY", "MASTERDOWN"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}
