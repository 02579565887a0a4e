package middleware

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// The proxy header fields an IPExtractor can read, as ProxyHeaders names
// them.
const (
	// headerForwarded is the RFC 7239 field: for=192.0.2.60;proto=https.
	headerForwarded = "Forwarded"
	// headerXForwardedFor is the de facto field: client, proxy1, proxy2.
	headerXForwardedFor = "X-Forwarded-For"
	// headerXRealIP holds one address, set by the proxy in front.
	headerXRealIP = "X-Real-IP"
)

// IPExtractor finds a request's client address. By default it is the direct
// peer's address. When the peer is within a trusted proxy prefix, the proxy
// headers are read (the first of them that the request carries, in the
// configured order) and the client is the right-most address of the chain
// that is not itself a trusted proxy.
//
// Addresses are normalised: IPv4-mapped IPv6 addresses become IPv4, zones are
// dropped, and, when configured, addresses are masked to a prefix (an IPv6
// /64 is one subscriber's network).
//
// The zero value is not usable; build one with NewIPExtractor. An IPExtractor
// is immutable and safe for concurrent use.
type IPExtractor struct {
	trusted []netip.Prefix
	headers []string
	named   bool // ProxyHeaders was given
	v4bits  int
	v6bits  int
}

// IPOption configures an IPExtractor.
type IPOption func(*IPExtractor) error

// TrustedProxies lists the prefixes ("10.0.0.0/8", "fd00::/8", "192.0.2.7")
// of the proxies whose headers are believed; given more than once, the
// lists add up. Default: none, so the headers are never read.
func TrustedProxies(cidrs ...string) IPOption {
	return func(e *IPExtractor) error {
		for _, c := range cidrs {
			var p netip.Prefix
			var err error
			if strings.Contains(c, "/") {
				p, err = netip.ParsePrefix(c)
			} else {
				var a netip.Addr
				a, err = netip.ParseAddr(c)
				if err == nil {
					a = a.Unmap().WithZone("")
					p = netip.PrefixFrom(a, a.BitLen())
				}
			}
			if err != nil {
				return fmt.Errorf("middleware: TrustedProxies: %q: %w", c, err)
			}
			if p.Addr().Is4In6() {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
				if p.Bits() < 0 {
					return fmt.Errorf("middleware: TrustedProxies: %q: mapped prefix shorter than /96", c)
				}
			}
			e.trusted = append(e.trusted, p.Masked())
		}
		return nil
	}
}

// ProxyHeaders sets which proxy header fields are read, in order of
// preference; the first one a request carries is used. Default:
// X-Forwarded-For alone, the field proxies append to. Name a field here only
// when your proxies set it and strip a client's own copy: a field a proxy
// passes through untouched lets a client pick its address (a proxy that
// appends to X-Forwarded-For while forwarding the client's Forwarded as it
// came would, with Forwarded preferred, hand the client that choice). Three
// fields are understood, named in any case: "Forwarded" (RFC 7239),
// "X-Forwarded-For" and "X-Real-IP"; any other name is an error, and so is
// ProxyHeaders without TrustedProxies, whose fields would never be read.
func ProxyHeaders(names ...string) IPOption {
	return func(e *IPExtractor) error {
		if len(names) == 0 {
			return errors.New("middleware: ProxyHeaders: no header")
		}
		if e.named {
			return errors.New("middleware: ProxyHeaders given twice: list every field in one")
		}
		e.headers, e.named = e.headers[:0], true
		for _, n := range names {
			switch {
			case strings.EqualFold(n, headerForwarded):
				e.headers = append(e.headers, headerForwarded)
			case strings.EqualFold(n, headerXForwardedFor):
				e.headers = append(e.headers, headerXForwardedFor)
			case strings.EqualFold(n, headerXRealIP):
				e.headers = append(e.headers, headerXRealIP)
			default:
				return fmt.Errorf("middleware: ProxyHeaders: unknown header %q", n)
			}
		}
		return nil
	}
}

// IPv6Prefix masks IPv6 client addresses to their first bits bits (64 makes
// one key per /64 network). Default 128: no masking.
func IPv6Prefix(bits int) IPOption {
	return func(e *IPExtractor) error {
		if bits < 1 || bits > 128 {
			return fmt.Errorf("middleware: IPv6Prefix: %d is not in [1, 128]", bits)
		}
		if e.v6bits != 0 {
			return errors.New("middleware: IPv6Prefix given twice")
		}
		e.v6bits = bits
		return nil
	}
}

// IPv4Prefix masks IPv4 client addresses to their first bits bits. Default
// 32: no masking.
func IPv4Prefix(bits int) IPOption {
	return func(e *IPExtractor) error {
		if bits < 1 || bits > 32 {
			return fmt.Errorf("middleware: IPv4Prefix: %d is not in [1, 32]", bits)
		}
		if e.v4bits != 0 {
			return errors.New("middleware: IPv4Prefix given twice")
		}
		e.v4bits = bits
		return nil
	}
}

// NewIPExtractor builds an IPExtractor; an option given twice is an error
// (but TrustedProxies, whose lists add up).
func NewIPExtractor(opts ...IPOption) (*IPExtractor, error) {
	e := &IPExtractor{headers: []string{headerXForwardedFor}} // the prefixes 0 until given
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("middleware: NewIPExtractor: option %d is nil", i)
		}
		if err := o(e); err != nil {
			return nil, err
		}
	}
	if e.v4bits == 0 {
		e.v4bits = 32
	}
	if e.v6bits == 0 {
		e.v6bits = 128
	}
	if e.named && len(e.trusted) == 0 {
		// Every client behind the proxy would share the proxy's key.
		return nil, errors.New("middleware: NewIPExtractor: ProxyHeaders without TrustedProxies: the fields are read only from a trusted proxy, and none is")
	}
	return e, nil
}

// parseAddr parses a peer address as net/http's RemoteAddr and gRPC's peer
// give it ("192.0.2.1:1234", "[2001:db8::1]:443", or a bare address), and
// normalises it: IPv4-mapped addresses become IPv4, zones are dropped.
func parseAddr(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Addr{}, false
	}
	switch {
	case s[0] == '[' && s[len(s)-1] == ']':
		s = s[1 : len(s)-1]
	case s[0] == '[' || strings.Count(s, ":") == 1:
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		return normal(ap.Addr()), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return normal(a), true
}

func normal(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// isTrusted reports whether a is within a trusted proxy prefix.
func (e *IPExtractor) isTrusted(a netip.Addr) bool {
	for _, p := range e.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientIP returns the client's address for a request whose direct peer is
// remoteAddr and whose header fields get returns (nil: none), masked to the
// configured prefix. get returns every value of a header or metadata field,
// in the order received, nil when absent: http.Header's Values method and
// gRPC metadata.MD's Get method fit. It reports false when remoteAddr is not an address (a
// Unix socket, an in-memory pipe).
func (e *IPExtractor) ClientIP(remoteAddr string, get func(name string) []string) (netip.Addr, bool) {
	peer, ok := parseAddr(remoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	client := peer
	if get != nil && len(e.trusted) > 0 && e.isTrusted(peer) {
		client = e.fromHeaders(peer, get)
	}
	return e.mask(client), true
}

func (e *IPExtractor) mask(a netip.Addr) netip.Addr {
	bits := e.v6bits
	if a.Is4() {
		bits = e.v4bits
	}
	if bits >= a.BitLen() {
		return a
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return a
	}
	return p.Addr()
}

// fromHeaders walks the first proxy header present from right to left.
// last is the nearest address known so far (the peer, then each trusted hop);
// it is the answer when the chain ends in garbage or holds only trusted hops.
func (e *IPExtractor) fromHeaders(peer netip.Addr, get func(name string) []string) netip.Addr {
	for _, h := range e.headers {
		vals := get(h)
		if len(vals) == 0 {
			continue
		}
		last := peer
		if h == headerXRealIP {
			a, ok := parseAddr(vals[len(vals)-1])
			if !ok {
				return last
			}
			return a
		}
		for i := len(vals) - 1; i >= 0; i-- {
			v := vals[i]
			for end := len(v); end > 0; {
				start := lastComma(v[:end])
				elem := v[start:end]
				end = start - 1
				if start == 0 {
					end = 0
				}
				if strings.TrimSpace(elem) == "" {
					continue
				}
				var a netip.Addr
				var ok bool
				if h == headerForwarded {
					a, ok = forwardedFor(elem)
				} else {
					a, ok = parseAddr(elem)
				}
				if !ok {
					return last
				}
				if !e.isTrusted(a) {
					return a
				}
				last = a
			}
		}
		return last
	}
	return peer
}

// lastComma returns the index just after the last comma of s that is not
// inside a quoted string, or 0. A quote is escaped when an odd number of
// backslashes precede it: in "a\\" the backslash is escaped, not the quote.
func lastComma(s string) int {
	quoted := false
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case '"':
			if !escaped(s, i) {
				quoted = !quoted
			}
		case ',':
			if !quoted {
				return i + 1
			}
		}
	}
	return 0
}

// escaped reports whether s[i] follows an odd number of backslashes.
func escaped(s string, i int) bool {
	n := 0
	for i > 0 && s[i-1] == '\\' {
		n++
		i--
	}
	return n%2 == 1
}

// cutParam cuts elem around its first ';' that is not inside a quoted
// string.
func cutParam(elem string) (pair, rest string) {
	quoted := false
	for i := 0; i < len(elem); i++ {
		switch elem[i] {
		case '\\':
			if quoted {
				i++
			}
		case '"':
			quoted = !quoted
		case ';':
			if !quoted {
				return elem[:i], elem[i+1:]
			}
		}
	}
	return elem, ""
}

// forwardedFor returns the address of the for= parameter of one
// forwarded-element ("for=192.0.2.60;proto=http;by=203.0.113.43"). An
// element without for=, or whose node name is "unknown" or obfuscated
// ("_hidden"), has none. The node's port, real or obfuscated ("_x1"), is
// dropped.
func forwardedFor(elem string) (netip.Addr, bool) {
	for elem != "" {
		var pair string
		pair, elem = cutParam(elem)
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "for") {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		return forwardedNode(strings.TrimSpace(v))
	}
	return netip.Addr{}, false
}

// forwardedNode parses an RFC 7239 node: nodename [ ":" node-port ], where
// nodename is an IPv4 address, a bracketed IPv6 address, "unknown" or an
// obfuscated identifier, and node-port is a port or an obfuscated port. It
// returns the address of a node named by one (also, leniently, an IPv6
// address without brackets or port).
func forwardedNode(v string) (netip.Addr, bool) {
	name, port := v, ""
	if v != "" && v[0] == '[' {
		end := strings.IndexByte(v, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		name, port = v[1:end], v[end+1:]
	} else if strings.Count(v, ":") == 1 {
		i := strings.IndexByte(v, ':')
		name, port = v[:i], v[i:]
	}
	if port != "" {
		if p, ok := strings.CutPrefix(port, ":"); !ok || !nodePort(p) {
			return netip.Addr{}, false
		}
	}
	a, err := netip.ParseAddr(name)
	if err != nil {
		return netip.Addr{}, false
	}
	return normal(a), true
}

// nodePort reports whether s is an RFC 7239 node-port: 1*5DIGIT, or an
// obfport, "_" 1*(ALPHA / DIGIT / "." / "_" / "-").
func nodePort(s string) bool {
	if s == "" {
		return false
	}
	if s[0] == '_' {
		if len(s) == 1 {
			return false
		}
		for i := 1; i < len(s); i++ {
			c := s[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return true
	}
	if len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
