package ratelimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adaptive"
	"github.com/sluice-go/sluice/ratelimit"
)

func inflightKey(key string) context.Context { return sluice.WithKey(context.Background(), key) }

// A per-key concurrency limit (a bulkhead of 1 per key) never has two calls
// of one key in flight: a flood of other keys does not evict the key while
// its call runs, or its next request would get a fresh bulkhead.
func TestKeyedKeepsAKeyWithACallInFlightWhenFull(t *testing.T) {
	k, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) { return adaptive.NewBulkhead(1) },
		ratelimit.WithMaxKeys(1))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Second
	t1, _, err := k.Admit(inflightKey("victim"), now)
	if err != nil {
		t.Fatalf("first call of victim: %v", err)
	}
	defer k.Done(t1, sluice.Success, now, 0)
	// Spoofed key: evicts "victim", whose call is still in flight.
	t2, _, err := k.Admit(inflightKey("spoofed"), now)
	if err == nil {
		k.Done(t2, sluice.Success, now, 0)
	}
	t3, _, err := k.Admit(inflightKey("victim"), now)
	if err == nil {
		k.Done(t3, sluice.Success, now, 0)
		t.Fatal("a second call of victim was admitted while its first is in flight under a per-key bulkhead of 1: the key was evicted with a call in flight")
	}
}

// The same through the idle TTL: a key whose call runs longer than the TTL
// is not idle.
func TestKeyedKeepsAKeyWithACallInFlightPastItsTTL(t *testing.T) {
	k, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) { return adaptive.NewBulkhead(1) },
		ratelimit.WithIdleTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t1, _, err := k.Admit(inflightKey("victim"), 0)
	if err != nil {
		t.Fatalf("first call: %v", err)
	}
	defer k.Done(t1, sluice.Success, 3*time.Second, 3*time.Second)
	t2, _, err := k.Admit(inflightKey("victim"), 2*time.Second)
	if err == nil {
		k.Done(t2, sluice.Success, 2*time.Second, 0)
		t.Fatal("second call of victim admitted while the first (started 2s ago) is still in flight under a bulkhead of 1: the key expired with a call in flight")
	}
}

// An idle TTL shorter than the time the key's limiter takes to become whole
// again is refused: a key that paused for the TTL would get a fresh full
// burst. So is a SetLimit that would make the window longer than the TTL.
func TestKeyedRefusesATTLShorterThanTheWindow(t *testing.T) {
	bucket := func(string) (sluice.Policy, error) {
		return ratelimit.NewTokenBucket(ratelimit.Every(time.Second), 10) // whole again after 10s
	}
	_, err := ratelimit.NewKeyed(bucket, ratelimit.WithIdleTTL(time.Second))
	if err == nil || !strings.Contains(err.Error(), "idle TTL of 1s") {
		t.Fatalf("NewKeyed with a TTL of 1s for limiters whole after 10s: %v, want an error naming the TTL", err)
	}
	k, err := ratelimit.NewKeyed(bucket, ratelimit.WithIdleTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tk, _, err := k.Admit(inflightKey("k"), 0)
	if err != nil {
		t.Fatal(err)
	}
	k.Done(tk, sluice.Success, 0, 0)
	slower := func(p sluice.Policy) error {
		return p.(*ratelimit.TokenBucket).SetLimit(ratelimit.Every(2*time.Second), 10)
	}
	if err := k.SetLimit(slower); err == nil {
		t.Fatal("SetLimit to limiters whole after 20s under a TTL of 10s: no error")
	}
	// Nothing changed: the key still refills at 1/s.
	admitted := 0
	for range 3 {
		if tk, _, err := k.Admit(inflightKey("k"), time.Second); err == nil {
			admitted++
			k.Done(tk, sluice.Success, time.Second, 0)
		}
	}
	if admitted != 3 {
		t.Errorf("after a refused SetLimit, %d of 3 admitted at 1s, want 3 (9 tokens left + 1 refilled)", admitted)
	}
}

// A Shaper shows no window, yet is whole only once its queue has emptied
// and a turn gone by: a TTL shorter than that is refused too, or a key back
// 2s after its request would be admitted 8s before its turn.
func TestKeyedRefusesATTLShorterThanAShapersTurn(t *testing.T) {
	shaper := func(string) (sluice.Policy, error) {
		return ratelimit.NewShaper(ratelimit.Every(10*time.Second), 0)
	}
	if _, err := ratelimit.NewKeyed(shaper, ratelimit.WithIdleTTL(time.Millisecond)); err == nil {
		t.Fatal("NewKeyed took an idle TTL of 1ms for Shapers spacing requests 10s apart")
	}
	if _, err := ratelimit.NewKeyed(shaper, ratelimit.WithIdleTTL(10*time.Second)); err != nil {
		t.Fatalf("an idle TTL of one turn: %v", err)
	}
}

// A Shaper takes n turns for a request of cost n: a key whose last request
// cost 5 turns of 10s is whole only 50s later, and an idle TTL of 10s (a
// longest wait and one unit turn) keeps it until then, or its next request
// would be admitted 40s before its turn.
func TestKeyedKeepsAShaperOwedTurns(t *testing.T) {
	k, err := ratelimit.NewKeyed(func(string) (sluice.Policy, error) {
		return ratelimit.NewShaper(ratelimit.Every(10*time.Second), 0)
	}, ratelimit.WithIdleTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := sluice.WithKey(context.Background(), "k")
	tk, _, err := k.Admit(sluice.WithCost(ctx, 5), 0)
	if err != nil {
		t.Fatalf("cost 5 at 0: %v", err)
	}
	k.Done(tk, sluice.Success, 0, 0)
	// The same key's Shaper, kept, rejects a unit request at 10s: its next
	// turn is at 50s and it never waits.
	tk, _, err = k.Admit(ctx, 10*time.Second)
	if err == nil {
		k.Done(tk, sluice.Success, 10*time.Second, 0)
		t.Fatal("a unit request of the key admitted at 10s, 40s before its turn (50s): the idle TTL forgot a Shaper still owed 4 turns")
	}
}
