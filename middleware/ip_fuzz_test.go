package middleware

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// chainAddrs are the addresses a fuzzed proxy chain is made of: the first
// ones within fuzzTrusted, the others not.
var chainAddrs = []string{
	"10.0.0.1", "10.200.3.4", "192.0.2.7", "fd00::5", "::ffff:10.9.9.9",
	"198.51.100.7", "203.0.113.9", "2001:db8::7", "2001:db8:cafe::17", "::ffff:198.51.100.8", "fe80::1%eth0",
}

var fuzzTrusted = []string{"10.0.0.0/8", "192.0.2.7", "fd00::/8"}

// headerText keeps the bytes a header field value can hold: no control
// characters but horizontal tab.
func headerText(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

// quoteString writes s as an RFC 9110 quoted-string.
func quoteString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// xffEntry writes a as a proxy writes it in X-Forwarded-For, in the form
// style picks: bare, with a port, bracketed.
func xffEntry(a netip.Addr, style byte) string {
	switch style % 3 {
	case 1:
		return netip.AddrPortFrom(a, 8080).String()
	case 2:
		if a.Is6() {
			return "[" + a.String() + "]"
		}
	}
	return a.String()
}

// forwardedNode writes a as an RFC 7239 node in the form style picks:
// a token, a quoted address, with a port, with an obfuscated port.
func forwardedNodeText(a netip.Addr, style byte) string {
	name := a.String()
	if a.Is6() {
		name = "[" + name + "]"
	}
	switch style % 4 {
	case 0:
		if a.Is4() {
			return name
		}
		return quoteString(name)
	case 1:
		return quoteString(name)
	case 2:
		return quoteString(name + ":4711")
	}
	return quoteString(name + ":_x-1.a")
}

// forwardedElem writes one proxy's forwarded-element for the node a, with
// the host the client asked for (a quoted-string the client chooses) before
// or after for=, as style picks.
func forwardedElem(a netip.Addr, host string, style byte) string {
	node := "for=" + forwardedNodeText(a, style)
	h := "host=" + quoteString(host)
	switch (style >> 2) % 4 {
	case 0:
		return node
	case 1:
		return node + ";proto=https;" + h
	case 2:
		return h + ";" + node
	}
	return "proto=http;" + h + ";" + node + ";by=" + quoteString("[2001:db8::1]:_p")
}

// FuzzClientIPChain builds the proxy header of a chain of proxies that each
// append the address of the hop before them, behind whatever the client sent
// itself, and checks the right-most untrusted hop rule: the client's own
// text, however malformed, and the host it asks for, however quoted, never
// choose the address once a hop of the chain is untrusted.
func FuzzClientIPChain(f *testing.F) {
	f.Add([]byte{5, 0}, "", "example.com", false)
	f.Add([]byte{5, 1, 0}, "for=6.6.6.6", "example.com", false)
	f.Add([]byte{6, 7, 0, 1}, `for="`, `a\`, true)
	f.Add([]byte{0x45, 0x14, 0x20}, "for=6.6.6.6", `x\`, true)
	f.Add([]byte{0x29, 0x28, 0x20}, "for=6.6.6.6", `a;for=6.6.6.6;b`, true)
	f.Add([]byte{0x25, 0x0b, 0x2c}, `6.6.6.6"`, `a,for=6.6.6.6`, false)
	f.Add([]byte{8, 0x81, 3, 0x42}, `"\`, `\"`, true)
	f.Fuzz(func(t *testing.T, hops []byte, spoof, host string, forwarded bool) {
		if len(hops) < 2 || len(hops) > 8 {
			return
		}
		spoof, host = headerText(spoof), headerText(host)
		field := headerXForwardedFor
		if forwarded {
			field = headerForwarded
		}
		e, err := NewIPExtractor(TrustedProxies(fuzzTrusted...), ProxyHeaders(field))
		if err != nil {
			t.Fatal(err)
		}
		addrs := make([]netip.Addr, len(hops))
		for i, h := range hops {
			addrs[i] = netip.MustParseAddr(chainAddrs[int(h&0x0f)%len(chainAddrs)])
		}
		// Each proxy appends the hop before it, on the line it got or
		// (bit 7) on a line of its own.
		var lines []string
		cur := spoof
		for i := 0; i < len(hops)-1; i++ {
			style := hops[i] >> 4
			var entry string
			if forwarded {
				entry = forwardedElem(addrs[i], host, style)
			} else {
				entry = xffEntry(addrs[i], style)
			}
			switch {
			case hops[i+1]&0x80 != 0 && cur != "":
				lines = append(lines, cur)
				cur = entry
			case cur == "":
				cur = entry
			case style&1 != 0:
				cur += " ,\t" + entry
			default:
				cur += ", " + entry
			}
		}
		lines = append(lines, cur)
		h := http.Header{field: lines}
		peer := addrs[len(addrs)-1]
		remote := netip.AddrPortFrom(peer, 443).String()
		got, ok := e.ClientIP(remote, h.Values)
		if !ok {
			t.Fatalf("ClientIP(%q) not ok", remote)
		}
		want, known := normal(peer), true
		if e.isTrusted(normal(peer)) {
			known = false
			for i := len(addrs) - 2; i >= 0; i-- {
				if a := normal(addrs[i]); !e.isTrusted(a) {
					want, known = a, true
					break
				}
			}
			if !known && spoof == "" {
				want, known = normal(addrs[0]), true
			}
		}
		if known && got != want {
			t.Fatalf("%s %q from %s: got %v, want %v", field, lines, remote, got, want)
		}
		if !known && !e.isTrusted(got) {
			// Every hop is trusted: the client's text decides, but only
			// with an address that it holds.
			if _, ok := addrIn(spoof, got); !ok {
				t.Fatalf("%s %q from %s: got %v, in none of the hops", field, lines, remote, got)
			}
		}
	})
}

// addrIn reports whether some substring of s parses (as parseAddr does) to a.
func addrIn(s string, a netip.Addr) (string, bool) {
	for i := 0; i < len(s); i++ {
		for j := i + 1; j <= len(s); j++ {
			if b, ok := parseAddr(s[i:j]); ok && b == a {
				return s[i:j], true
			}
		}
	}
	return "", false
}

// FuzzClientIP feeds arbitrary peers and proxy fields: the address found is
// the peer's or one that the fields hold, the headers count only from a
// trusted peer, and masking is idempotent and keeps the address in its
// prefix.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:5000", "6.6.6.6, 198.51.100.2, 10.1.1.1", `for=198.51.100.7;proto=https, for="[2001:db8:cafe::17]:4711"`, "198.51.100.8", uint8(64), uint8(24))
	f.Add("[fd00::1]:443", "[2001:db8::9]:4000, 198.51.100.3:81", `for="198.51.100.7:_x1", for="10.9.9.9:_proxy-1.a"`, "", uint8(48), uint8(32))
	f.Add("[::ffff:10.1.2.3]:80", "junk", `for=unknown, for=_hidden`, "::ffff:198.51.100.9", uint8(128), uint8(8))
	f.Add("192.0.2.7", `"a,b", 203.0.113.1`, `for=198.51.100.7;ext="a,\"b", for="x\\"`, "not-an-ip", uint8(1), uint8(1))
	f.Add("@", "", "", "", uint8(64), uint8(24))
	f.Add("[fe80::1%eth0]:1", "fe80::2%25x", `For="[fe80::3%eth1]"`, "fe80::4%lo", uint8(10), uint8(30))
	f.Fuzz(func(t *testing.T, remote, xff, fwd, real string, v6, v4 uint8) {
		if len(xff)+len(fwd)+len(real) > 512 {
			return
		}
		h := http.Header{}
		for _, kv := range [][2]string{{headerXForwardedFor, xff}, {headerForwarded, fwd}, {headerXRealIP, real}} {
			if kv[1] != "" {
				h[http.CanonicalHeaderKey(kv[0])] = strings.Split(kv[1], "\n")
			}
		}
		plain, err := NewIPExtractor(TrustedProxies(fuzzTrusted...),
			ProxyHeaders(headerForwarded, headerXForwardedFor, headerXRealIP))
		if err != nil {
			t.Fatal(err)
		}
		peer, peerOK := parseAddr(remote)
		got, ok := plain.ClientIP(remote, h.Values)
		if ok != peerOK {
			t.Fatalf("ClientIP(%q) ok %v, parseAddr ok %v", remote, ok, peerOK)
		}
		if !ok {
			return
		}
		if !got.IsValid() || got.Is4In6() || got.Zone() != "" {
			t.Fatalf("ClientIP(%q) = %v, not normalised", remote, got)
		}
		if peer.Is4In6() || peer.Zone() != "" {
			t.Fatalf("parseAddr(%q) = %v, not normalised", remote, peer)
		}
		if !plain.isTrusted(peer) && got != peer {
			t.Fatalf("untrusted peer %v: headers read, got %v", peer, got)
		}
		if got != peer {
			if _, ok := addrIn(xff+fwd+real, got); !ok {
				if _, ok := addrIn(strings.Join([]string{xff, fwd, real}, "\x00"), got); !ok {
					t.Fatalf("got %v, neither the peer %v nor in the fields", got, peer)
				}
			}
		}
		v6bits, v4bits := int(v6%128)+1, int(v4%32)+1
		masked, err := NewIPExtractor(TrustedProxies(fuzzTrusted...),
			ProxyHeaders(headerForwarded, headerXForwardedFor, headerXRealIP), IPv6Prefix(v6bits), IPv4Prefix(v4bits))
		if err != nil {
			t.Fatal(err)
		}
		m, ok := masked.ClientIP(remote, h.Values)
		if !ok {
			t.Fatalf("masked ClientIP(%q) not ok", remote)
		}
		bits := v6bits
		if got.Is4() {
			bits = v4bits
		}
		p := netip.PrefixFrom(got, bits).Masked()
		if m != p.Addr() || !p.Contains(got) {
			t.Fatalf("%v masked to /%d is %v, want %v", got, bits, m, p.Addr())
		}
		if masked.mask(m) != m {
			t.Fatalf("masking %v again gives %v", m, masked.mask(m))
		}
	})
}

// FuzzParseAddr checks that every form a peer address comes in parses back
// to the address, normalised, and that whatever parses is normalised.
func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{"192.0.2.1", "2001:db8::1", "::ffff:192.0.2.1", "fe80::1%eth0", "::", "0.0.0.0", "1::"} {
		f.Add(s, uint16(1234), "")
	}
	f.Add("1.2.3.4", uint16(0), " [1.2.3.4]:80 ")
	f.Add("::1", uint16(65535), "[::1%]")
	f.Fuzz(func(t *testing.T, addr string, port uint16, raw string) {
		if a, ok := parseAddr(raw); ok && (!a.IsValid() || a.Is4In6() || a.Zone() != "") {
			t.Fatalf("parseAddr(%q) = %v, not normalised", raw, a)
		}
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return
		}
		want := a.Unmap().WithZone("")
		forms := []string{a.String(), netip.AddrPortFrom(a, port).String(), " " + a.String() + "\t"}
		if a.Is6() {
			forms = append(forms, "["+a.String()+"]")
		}
		for _, s := range forms {
			if got, ok := parseAddr(s); !ok || got != want {
				t.Fatalf("parseAddr(%q) = %v, %v; want %v", s, got, ok, want)
			}
		}
	})
}

// FuzzTrustedProxies checks that any prefix list is either refused or
// kept as normalised, masked prefixes, and that the peers it names are
// trusted.
func FuzzTrustedProxies(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "192.0.2.7", "fd00::/8", "::ffff:10.0.0.0/104", "::ffff:10.0.0.0/90", "::ffff:1.2.3.4", "fe80::1%eth0", "1.2.3.4/33", "::/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cidr string) {
		e, err := NewIPExtractor(TrustedProxies(cidr))
		if err != nil {
			return
		}
		if len(e.trusted) != 1 {
			t.Fatalf("%q: %d prefixes", cidr, len(e.trusted))
		}
		p := e.trusted[0]
		if !p.IsValid() || p != p.Masked() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
			t.Fatalf("%q kept as %v", cidr, p)
		}
		if !e.isTrusted(p.Addr()) {
			t.Fatalf("%q: %v not trusted", cidr, p.Addr())
		}
		if a, err := netip.ParseAddr(strings.SplitN(cidr, "/", 2)[0]); err == nil && !strings.Contains(cidr, "/") {
			if !e.isTrusted(normal(a)) {
				t.Fatalf("%q: the address itself is not trusted", cidr)
			}
		}
	})
}
