package dashboard

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sync"
	"unicode/utf8"
)

const (
	topN        = 10   // keys shown per keyed limiter
	keysTracked = 1024 // keys counted per keyed limiter
)

// topKeys counts a keyed limiter's rejections by key, for at most
// keysTracked keys: when a new key finds it full, the keys with the fewest
// rejections are forgotten, all at once, so keys rejected often stay and
// those met once make room.
type topKeys struct {
	mu     sync.Mutex
	counts map[string]uint64
}

type keyCount struct {
	Key      string `json:"key"`
	Rejected uint64 `json:"rejected"`
}

func (t *topKeys) add(key string) {
	key = shortKey(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts == nil {
		t.counts = make(map[string]uint64)
	}
	if _, ok := t.counts[key]; !ok {
		if len(t.counts) >= keysTracked {
			low := uint64(math.MaxUint64)
			for _, n := range t.counts {
				low = min(low, n)
			}
			for k, n := range t.counts {
				if n == low {
					delete(t.counts, k)
				}
			}
		}
	}
	t.counts[key]++
}

// top returns the topN keys with the most rejections, most first.
func (t *topKeys) top() []keyCount {
	t.mu.Lock()
	all := make([]keyCount, 0, len(t.counts))
	for k, n := range t.counts {
		all = append(all, keyCount{k, n})
	}
	t.mu.Unlock()
	slices.SortFunc(all, func(a, b keyCount) int {
		if c := cmp.Compare(b.Rejected, a.Rejected); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return all[:min(len(all), topN)]
}

// maxKeyLen is the longest key kept whole: the snapshot is bounded in
// bytes, whatever keys the clients send.
const maxKeyLen = 64

// shortKey returns key, or when it is longer than maxKeyLen its first 48
// bytes (cut at a rune), an ellipsis and a hash of the whole, which tells
// long keys with a common prefix apart.
func shortKey(key string) string {
	if len(key) <= maxKeyLen {
		return key
	}
	cut := 48
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return fmt.Sprintf("%s…%016x", key[:cut], h.Sum64())
}
