package middleware

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClientIP(t *testing.T) {
	trusted := []IPOption{TrustedProxies("10.0.0.0/8", "192.0.2.7", "fd00::/8")}
	// allHeaders reads every proxy field this package knows, Forwarded first.
	allHeaders := append([]IPOption{ProxyHeaders(headerForwarded, headerXForwardedFor, headerXRealIP)}, trusted...)
	tests := []struct {
		name   string
		opts   []IPOption
		remote string
		header http.Header
		want   string
		ok     bool
	}{
		{name: "peer v4", remote: "203.0.113.9:5000", want: "203.0.113.9", ok: true},
		{name: "peer v6 with zone", remote: "[fe80::1%eth0]:443", want: "fe80::1", ok: true},
		{name: "peer v4-mapped v6", remote: "[::ffff:203.0.113.9]:80", want: "203.0.113.9", ok: true},
		{name: "bare address", remote: "2001:db8::1", want: "2001:db8::1", ok: true},
		{name: "not an address", remote: "@", ok: false},
		{name: "empty", remote: "", ok: false},
		{
			name: "spoofed XFF from untrusted peer ignored", opts: trusted,
			remote: "203.0.113.9:5000", header: http.Header{"X-Forwarded-For": {"1.2.3.4"}},
			want: "203.0.113.9", ok: true,
		},
		{
			name:   "XFF without trusted proxies configured ignored",
			remote: "10.0.0.1:5000", header: http.Header{"X-Forwarded-For": {"1.2.3.4"}},
			want: "10.0.0.1", ok: true,
		},
		{
			name: "XFF from trusted peer: right-most untrusted", opts: trusted,
			remote: "10.0.0.1:5000", header: http.Header{"X-Forwarded-For": {"6.6.6.6, 198.51.100.2, 10.1.1.1"}},
			want: "198.51.100.2", ok: true,
		},
		{
			name: "XFF over several lines", opts: trusted,
			remote: "10.0.0.1:5000", header: http.Header{"X-Forwarded-For": {"6.6.6.6", "198.51.100.2 , 192.0.2.7"}},
			want: "198.51.100.2", ok: true,
		},
		{
			name: "XFF all trusted: left-most", opts: trusted,
			remote: "10.0.0.1:5000", header: http.Header{"X-Forwarded-For": {"10.2.2.2, 10.1.1.1"}},
			want: "10.2.2.2", ok: true,
		},
		{
			name: "XFF garbage hop: nearest trusted", opts: trusted,
			remote: "10.0.0.1:5000", header: http.Header{"X-Forwarded-For": {"6.6.6.6, junk, 10.1.1.1"}},
			want: "10.1.1.1", ok: true,
		},
		{
			name: "Forwarded preferred over XFF", opts: allHeaders,
			remote: "10.0.0.1:5000",
			header: http.Header{
				"Forwarded":       {`for=198.51.100.7;proto=https, for="[2001:db8:cafe::17]:4711";by=10.0.0.1`},
				"X-Forwarded-For": {"6.6.6.6"},
			},
			want: "2001:db8:cafe::17", ok: true,
		},
		{
			name: "Forwarded skips trusted hops", opts: allHeaders,
			remote: "10.0.0.1:5000",
			header: http.Header{"Forwarded": {`for=198.51.100.7, For="10.9.9.9:80"`}},
			want:   "198.51.100.7", ok: true,
		},
		{
			name: "Forwarded unknown node stops", opts: allHeaders,
			remote: "10.0.0.1:5000",
			header: http.Header{"Forwarded": {`for=198.51.100.7, for=unknown`}},
			want:   "10.0.0.1", ok: true,
		},
		{
			name: "Forwarded quoted comma", opts: allHeaders,
			remote: "10.0.0.1:5000",
			header: http.Header{"Forwarded": {`for=198.51.100.7;ext="a,b"`}},
			want:   "198.51.100.7", ok: true,
		},
		{
			name: "XFF with bracketed IPv6 and port, and IPv4 with port", opts: trusted,
			remote: "10.0.0.1:5000", header: http.Header{"X-Forwarded-For": {"[2001:db8::9]:4000, 198.51.100.3:81, 10.0.0.5"}},
			want: "198.51.100.3", ok: true,
		},
		{
			name: "Forwarded obfuscated node stops at the nearest trusted hop", opts: allHeaders,
			remote: "10.0.0.1:5000",
			header: http.Header{"Forwarded": {`for=198.51.100.7, for=_hidden, for=10.3.3.3`}},
			want:   "10.3.3.3", ok: true,
		},
		{
			name: "Forwarded IPv4 with an obfuscated port", opts: allHeaders,
			remote: "10.0.0.1:5000",
			header: http.Header{"Forwarded": {`for="198.51.100.7:_x1", for="10.9.9.9:_proxy-1.a"`}},
			want:   "198.51.100.7", ok: true,
		},
		{
			name: "Forwarded IPv6 with an obfuscated port", opts: allHeaders,
			remote: "10.0.0.1:5000",
			header: http.Header{"Forwarded": {`for="[2001:db8::7]:_x1"`}},
			want:   "2001:db8::7", ok: true,
		},
		{
			name: "Forwarded IPv6 with brackets and no port", opts: allHeaders,
			remote: "10.0.0.1:5000",
			header: http.Header{"Forwarded": {`for="[2001:db8::8]"`}},
			want:   "2001:db8::8", ok: true,
		},
		{
			name: "Forwarded obfuscated node with an obfuscated port stops", opts: allHeaders,
			remote: "10.0.0.1:5000",
			header: http.Header{"Forwarded": {`for=198.51.100.7, for="_hidden:_x1", for=10.3.3.3`}},
			want:   "10.3.3.3", ok: true,
		},
		{
			name: "Forwarded unknown node with a port stops", opts: allHeaders,
			remote: "10.0.0.1:5000",
			header: http.Header{"Forwarded": {`for=198.51.100.7, for="unknown:8080"`}},
			want:   "10.0.0.1", ok: true,
		},
		{
			name: "Forwarded element without for= stops", opts: allHeaders,
			remote: "10.0.0.1:5000",
			header: http.Header{"Forwarded": {`for=198.51.100.7, proto=https`}},
			want:   "10.0.0.1", ok: true,
		},
		{
			name: "X-Real-IP from trusted peer", opts: allHeaders,
			remote: "[fd00::5]:5000", header: http.Header{"X-Real-Ip": {"198.51.100.8"}},
			want: "198.51.100.8", ok: true,
		},
		{
			name: "X-Real-IP from untrusted peer ignored", opts: allHeaders,
			remote: "198.51.100.1:5000", header: http.Header{"X-Real-Ip": {"10.0.0.3"}},
			want: "198.51.100.1", ok: true,
		},
		{
			name: "only the configured headers", opts: append([]IPOption{ProxyHeaders("x-real-ip")}, trusted...),
			remote: "10.0.0.1:5000", header: http.Header{"X-Forwarded-For": {"198.51.100.2"}},
			want: "10.0.0.1", ok: true,
		},
		{
			name: "IPv6 grouped by /64", opts: []IPOption{IPv6Prefix(64)},
			remote: "[2001:db8:1:2:3:4:5:6]:443", want: "2001:db8:1:2::", ok: true,
		},
		{
			name: "IPv4 not touched by IPv6 prefix", opts: []IPOption{IPv6Prefix(64)},
			remote: "198.51.100.1:1", want: "198.51.100.1", ok: true,
		},
		{
			name: "IPv4 grouped by /24", opts: []IPOption{IPv4Prefix(24)},
			remote: "198.51.100.77:1", want: "198.51.100.0", ok: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := NewIPExtractor(tt.opts...)
			require.NoError(t, err)
			a, ok := e.ClientIP(tt.remote, tt.header.Values)
			require.Equal(t, tt.ok, ok)
			if ok {
				assert.Equal(t, tt.want, a.String())
			}
		})
	}
}

func TestNewIPExtractorRejectsBadInput(t *testing.T) {
	for _, o := range []IPOption{
		TrustedProxies("10.0.0.0/33"),
		TrustedProxies("not-an-ip"),
		IPv6Prefix(0),
		IPv6Prefix(129),
		IPv4Prefix(33),
		ProxyHeaders(),
		ProxyHeaders("X-Client-IP"),
	} {
		_, err := NewIPExtractor(o, TrustedProxies("10.0.0.0/8"))
		assert.Error(t, err)
	}
	// Fields named and no proxy trusted to set them: never read, every
	// client behind the proxy would share its key.
	_, err := NewIPExtractor(ProxyHeaders("X-Real-IP"))
	assert.ErrorContains(t, err, "without TrustedProxies")
}

func TestTrustedProxiesMappedPrefix(t *testing.T) {
	e, err := NewIPExtractor(TrustedProxies("::ffff:10.0.0.0/104"))
	require.NoError(t, err)
	a, ok := e.ClientIP("10.1.2.3:80", http.Header{"X-Forwarded-For": {"198.51.100.4"}}.Values)
	require.True(t, ok)
	assert.Equal(t, "198.51.100.4", a.String())
}

func TestClientIPAllocatesNothing(t *testing.T) {
	e, err := NewIPExtractor(TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	h := http.Header{"X-Forwarded-For": {"198.51.100.2, 10.1.1.1"}}
	get := h.Values
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := e.ClientIP("10.0.0.1:5000", get); !ok {
			t.Fatal("no address")
		}
	})
	assert.Zero(t, allocs)
}

// By default only X-Forwarded-For is read: a Forwarded field that a proxy
// passes through as the client sent it must not choose the address.
func TestClientIPDefaultIgnoresClientForwarded(t *testing.T) {
	e, err := NewIPExtractor(TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	h := http.Header{"X-Forwarded-For": {"203.0.113.9"}, "Forwarded": {"for=6.6.6.6"}, "X-Real-Ip": {"6.6.6.7"}}
	got, ok := e.ClientIP("10.0.0.1:5000", h.Values)
	require.True(t, ok)
	assert.Equal(t, "203.0.113.9", got.String())
}

// RFC 7239 §6: node = nodename [ ":" node-port ]; a node-port is a port or
// an obfuscated port, and only a node named by an address has one to give.
func TestForwardedForNodes(t *testing.T) {
	for _, tt := range []struct {
		elem string
		want string // "" when the element names no address
	}{
		{`for=198.51.100.7`, "198.51.100.7"},
		{`for="198.51.100.7:4711"`, "198.51.100.7"},
		{`for="198.51.100.7:_x1"`, "198.51.100.7"},
		{`for="198.51.100.7:_a.b_c-D9"`, "198.51.100.7"},
		{`for="[2001:db8::7]"`, "2001:db8::7"},
		{`for="[2001:db8::7]:4711"`, "2001:db8::7"},
		{`for="[2001:db8::7]:_x1";proto=https`, "2001:db8::7"},
		{`for="[::ffff:198.51.100.7]:_x1"`, "198.51.100.7"},
		{`for=unknown`, ""},
		{`for="unknown:_x1"`, ""},
		{`for=_hidden`, ""},
		{`for="_hidden:4711"`, ""},
		{`for="198.51.100.7:_"`, ""},
		{`for="198.51.100.7:x1"`, ""},
		{`for="198.51.100.7:123456"`, ""},
		{`for="198.51.100.7:"`, ""},
		{`for="[2001:db8::7]:_a b"`, ""},
		{`for="[2001:db8::7]x"`, ""},
		{`for="[2001:db8::7"`, ""},
		{`for="[_hidden]:_x1"`, ""},
		{`by=10.0.0.1`, ""},
	} {
		a, ok := forwardedFor(tt.elem)
		if tt.want == "" {
			assert.False(t, ok, "%s gave %v", tt.elem, a)
			continue
		}
		if assert.True(t, ok, tt.elem) {
			assert.Equal(t, tt.want, a.String(), tt.elem)
		}
	}
}

// A quoted-string that a proxy writes for a client's value (here its Host,
// "x\" and "a;for=6.6.6.6;b") is one value, whatever it holds: an escaped
// backslash before its closing quote, a ';' or a ',' inside it, neither
// hides the element boundaries nor lets the client's own Forwarded name the
// address.
func TestForwardedQuotedStringsKeepElements(t *testing.T) {
	e, err := NewIPExtractor(TrustedProxies("10.0.0.0/8"), ProxyHeaders(headerForwarded))
	require.NoError(t, err)
	for _, fwd := range []string{
		`for=6.6.6.6;, for=198.51.100.7;host="x\\"`,
		`for=6.6.6.6;, for=198.51.100.7;host="x\\", for=10.0.0.2`,
		`for=6.6.6.6, host="a;for=6.6.6.6;b";for=198.51.100.7`,
		`for=6.6.6.6, host="a,for=6.6.6.6;b\";for=6.6.6.6";for=198.51.100.7;proto=https`,
	} {
		got, ok := e.ClientIP("10.0.0.1:5000", http.Header{"Forwarded": {fwd}}.Values)
		require.True(t, ok)
		assert.Equal(t, "198.51.100.7", got.String(), fwd)
	}
}
