package middleware

import "testing"

// The shared bucket of the requests no function keys (MissingKey's
// "unknown", or SharedKey's key) is a kind of its own: a client that sends
// the first function's key spelt as it does not draw on (nor exhaust) the
// budget every client without a key shares, with one function or several.
func TestTheSharedBucketIsAKindOfItsOwn(t *testing.T) {
	for _, missing := range []MissingKey{{}, SharedKey("anonymous")} {
		k, err := NewKeyer(missing, KeyByHeader("X-Api-Key"), KeyByIP(nil))
		if err != nil {
			t.Fatal(err)
		}
		one, err := NewKeyer(missing, KeyByHeader("X-Api-Key"))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []*Keyer{k, one} {
			anon, err := k.key(fakeRequest{remote: "pipe"}) // no key at all
			if err != nil {
				t.Fatal(err)
			}
			spelt, err := k.key(fakeRequest{remote: "192.0.2.1:1234", header: map[string][]string{"X-Api-Key": {anon}}})
			if err != nil {
				t.Fatal(err)
			}
			if spelt == anon {
				t.Errorf("a client sending X-Api-Key %q is keyed %q, the bucket every key-less request shares", anon, spelt)
			}
		}
	}
	_, err := NewKeyer(SharedKey("1:x"), KeyByHeader("X-Api-Key"), KeyByIP(nil))
	if err == nil {
		t.Error("NewKeyer took a SharedKey spelt as the second function's key for x")
	}
}

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
