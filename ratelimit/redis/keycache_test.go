package redislimit

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// A shared limiter remembers the Redis key of each of its last 4096 user
// keys; user keys of a client's header, a megabyte each, must not pin up to
// 4 GB: a long one is not kept.
func TestTheKeyCacheHoldsNoLongKey(t *testing.T) {
	s := newServer(t)
	l, err := NewGCRA(newClient(t, s.Addr), ratelimit.PerSecond(100), 10, WithName(uniqueName("gcra")))
	if err != nil {
		t.Fatal(err)
	}
	const keys, size = 64, 64 << 10
	for i := range keys {
		key := strings.Repeat(string(rune('a'+i%26)), size) + string(rune('A'+i/26))
		ctx := sluice.WithKey(context.Background(), key)
		tk, _, err := l.Admit(ctx, 0)
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		l.Done(tk, sluice.Success, 0, 0)
	}
	held := 0
	for _, m := range l.limits {
		m.keys.mu.RLock()
		for k := range m.keys.m {
			held += len(k)
		}
		m.keys.mu.RUnlock()
	}
	if held > keys*128 {
		t.Errorf("the limiter's key cache holds %d bytes of user keys after %d keys of %d KiB; want at most %d (digests, as ratelimit.Keyed holds them)", held, keys, size>>10, keys*128)
	}
}
