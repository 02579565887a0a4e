package middleware

import "testing"

// A second IPv4Prefix, IPv6Prefix or ProxyHeaders is an error, not the
// first silently replaced (which would decide, unseen, which header a
// client can spoof).
func TestAnIPOptionGivenTwiceIsAnError(t *testing.T) {
	cases := map[string][]IPOption{
		"IPv4Prefix":   {IPv4Prefix(24), IPv4Prefix(32)},
		"IPv6Prefix":   {IPv6Prefix(64), IPv6Prefix(128)},
		"ProxyHeaders": {TrustedProxies("10.0.0.0/8"), ProxyHeaders("X-Real-IP"), ProxyHeaders("X-Forwarded-For")},
	}
	for name, opts := range cases {
		if _, err := NewIPExtractor(opts...); err == nil {
			t.Errorf("NewIPExtractor(%s twice): nil error", name)
		}
	}
}
