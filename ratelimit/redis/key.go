package redislimit

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sync"

	"github.com/sluice-go/sluice"
)

// hashKey returns the first 128 bits of the SHA-256 of s: the identity of a
// user key (or a resource) in Redis. A collision-resistant hash, because the
// keys may come from clients: with a weak one, a client that chooses its key
// could find one that shares a victim's quota.
func hashKey(s string) [16]byte {
	sum := sha256.Sum256([]byte(s))
	var h [16]byte
	copy(h[:], sum[:16])
	return h
}

func appendHashHex(b []byte, h [16]byte) []byte {
	return hex.AppendEncode(b, h[:])
}

// key returns the Redis key of the request's state for this limit and a
// summary of the hash of its user key, which is the key's Cluster hash tag:
//
//	<prefix>:<name>:<alg>[/<period µs>]:{<hash of the key, hex>}
//	<prefix>:<name>:<alg>[/<period µs>]:<hash of the resource, hex>:{<hash of the key, hex>}
//
// The user key is hashed (SHA-256, 128 bits), so braces in it cannot choose
// the slot, no chosen key can share another's quota, and every limit keyed by
// the same user key lands in the same slot. A window's period is part of
// the key (see keyPrefix): a limiter whose window changes starts afresh
// instead of reading a count kept on another time scale.
func (m *limit) key(ctx context.Context) (string, uint64) {
	user := m.keyFunc(ctx)
	if m.perResource || len(user) > maxCachedKey {
		// A long key (a client's header may be a megabyte) is hashed each
		// time rather than kept: the cache's memory is bounded by its
		// entries whatever the keys.
		return m.buildKey(ctx, user)
	}
	return m.keys.get(user, func() (string, uint64) { return m.buildKey(ctx, user) })
}

func (m *limit) buildKey(ctx context.Context, user string) (string, uint64) {
	h := hashKey(user)
	var buf [192]byte
	b := append(buf[:0], m.keyPre...)
	if m.perResource {
		res, _ := sluice.ResourceFrom(ctx)
		b = appendHashHex(b, hashKey(res))
		b = append(b, ':')
	}
	b = append(b, '{')
	b = appendHashHex(b, h)
	b = append(b, '}')
	return string(b), binary.BigEndian.Uint64(h[:8])
}

// keyCacheSize bounds a limit's cache of Redis keys by user key, and
// maxCachedKey the length of a user key it keeps.
const (
	keyCacheSize = 4096
	maxCachedKey = 128
)

// keyCache remembers the Redis keys of recent user keys, so a returning user
// costs a map lookup instead of a hash and an allocation. When full it starts
// afresh.
type keyCache struct {
	mu sync.RWMutex
	m  map[string]keyEntry
}

type keyEntry struct {
	key string
	tag uint64
}

func (c *keyCache) get(user string, build func() (string, uint64)) (string, uint64) {
	c.mu.RLock()
	e, ok := c.m[user]
	c.mu.RUnlock()
	if ok {
		return e.key, e.tag
	}
	k, h := build()
	c.mu.Lock()
	if c.m == nil || len(c.m) >= keyCacheSize {
		c.m = make(map[string]keyEntry)
	}
	c.m[user] = keyEntry{k, h}
	c.mu.Unlock()
	return k, h
}
