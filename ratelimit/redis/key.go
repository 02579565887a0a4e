package redislimit

import (
	"context"
	"sync"

	"github.com/sluice-go/sluice"
)

// FNV-1a, 64 bits.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnv64(s string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

const hexDigits = "0123456789abcdef"

func appendHex(b []byte, h uint64) []byte {
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, hexDigits[(h>>uint(shift))&0xf])
	}
	return b
}

// key returns the Redis key of the request's state for this limit and the
// hash of its user key, which is the key's Cluster hash tag:
//
//	<prefix>:<name>:<alg>:{<fnv64 of the key, hex>}
//	<prefix>:<name>:<alg>:<fnv64 of the resource, hex>:{<fnv64 of the key, hex>}
//
// The user key is hashed, so braces in it cannot choose the slot, and every
// limit keyed by the same user key lands in the same slot.
func (m *limit) key(ctx context.Context) (string, uint64) {
	user := m.keyFunc(ctx)
	if m.perResource {
		return m.buildKey(ctx, user)
	}
	return m.keys.get(user, func() (string, uint64) { return m.buildKey(ctx, user) })
}

func (m *limit) buildKey(ctx context.Context, user string) (string, uint64) {
	h := fnv64(user)
	var buf [160]byte
	b := append(buf[:0], m.keyPre...)
	if m.perResource {
		res, _ := sluice.ResourceFrom(ctx)
		b = appendHex(b, fnv64(res))
		b = append(b, ':')
	}
	b = append(b, '{')
	b = appendHex(b, h)
	b = append(b, '}')
	return string(b), h
}

// keyCacheSize bounds a limit's cache of Redis keys by user key.
const keyCacheSize = 4096

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
