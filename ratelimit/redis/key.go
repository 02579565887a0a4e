package redislimit

import (
	"context"

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
	h := fnv64(m.keyFunc(ctx))
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
