package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/http/httpguts"

	"github.com/sluice-go/sluice/middleware"
	"github.com/sluice-go/sluice/ratelimit"
)

// spec is a parsed and checked rules file.
type spec struct {
	guards    []*guardSpec // in the file's order
	byName    map[string]*guardSpec
	policies  []*policySpec // every guard's, in the file's order
	routes    []routeSpec
	def       string // the default route's guard; "" for none
	defAt     pos
	fallbacks []fallbackSpec
}

type guardSpec struct {
	name     string
	at       pos
	timeout  time.Duration
	shadow   bool
	key      *keySpec
	policies []*policySpec
}

// policySpec is one policy of a guard. Every field but line is compared to
// tell whether a reload changed it.
type policySpec struct {
	at    pos
	name  string `rules:"name"`
	kind  string `rules:"kind"`
	store string `rules:"store"` // "" (local) or "redis"
	fail  string `rules:"fail"`  // Redis failure policy: "", "open", "closed", "local"
	// instances is how many instances share a Redis limit, whose local
	// share (fail: local) is the limit divided by them.
	instances int `rules:"instances"`

	perKey  bool          `rules:"per_key"`
	maxKeys int           `rules:"max_keys"`
	idleTTL time.Duration `rules:"idle_ttl"`
	shadow  bool          `rules:"shadow"`

	rate       ratelimit.Rate `rules:"rate"`
	burst      int64          `rules:"burst"`
	limit      int64          `rules:"limit"`
	capacity   int64          `rules:"capacity"`
	window     time.Duration  `rules:"window"`
	buckets    int            `rules:"buckets"`
	maxWait    time.Duration  `rules:"max_wait"`
	warmUp     time.Duration  `rules:"warm_up"`
	coldFactor int64          `rules:"cold_factor"`

	consecutive int           `rules:"consecutive_failures"`
	errorRatio  float64       `rules:"error_ratio"`
	errorCount  int           `rules:"error_count"`
	minRequests int           `rules:"min_requests"`
	slowCall    time.Duration `rules:"slow_call"`
	slowRatio   float64       `rules:"slow_ratio"`
	windowCalls int           `rules:"window_calls"`
	openFor     time.Duration `rules:"open_for"`
	halfOpen    int           `rules:"half_open_probes"`
	multiplier  float64       `rules:"multiplier"`
	queue       int           `rules:"queue"`
	on          bool          `rules:"on"`
	retryAfter  time.Duration `rules:"retry_after"`
	shape       int           // how many window shapes were given
}

// numbersOnly returns p without its place in the file and its shadow mode,
// which its Guard keeps, for comparing what a reload changed.
func (p policySpec) numbersOnly() policySpec {
	p.at, p.shadow = pos{}, false
	return p
}

// sameShape reports whether p and q are the same kind of policy, so that q's
// numbers can be set on p's policy in place.
func (p *policySpec) sameShape(q *policySpec) bool {
	return p.kind == q.kind && p.store == q.store && p.fail == q.fail && p.instances == q.instances &&
		p.perKey == q.perKey && p.idleTTL == q.idleTTL
}

type keySpec struct {
	header, cookie string
	ip             bool
	proxies        []string
	proxyHeaders   []string
	v4, v6         int
	reject         bool // a request without a key is rejected (400)
}

type routeSpec struct {
	at      pos
	pattern string
	guard   string // "none": unguarded
}

type fallbackSpec struct {
	at      pos
	route   string // "": every route
	cause   string
	status  int
	headers http.Header
	body    string
}

// pos is a place in the file.
type pos struct{ line, col int }

func at(n *yaml.Node) pos { return pos{n.Line, n.Column} }

// kinds lists each policy kind with the fields it requires and those it
// also accepts (name, kind and shadow are accepted by all).
var kinds = map[string]struct{ need, may string }{
	"token-bucket":   {"rate burst", "per_key max_keys idle_ttl store fail instances"},
	"gcra":           {"rate burst", "per_key max_keys idle_ttl store fail instances"},
	"leaky-bucket":   {"rate capacity", "per_key max_keys idle_ttl"},
	"fixed-window":   {"limit window", "per_key max_keys idle_ttl store fail instances"},
	"sliding-window": {"limit window", "buckets per_key max_keys idle_ttl store fail instances"},
	"sliding-log":    {"limit window", "per_key max_keys idle_ttl"},
	"warm-up":        {"rate burst warm_up cold_factor", "per_key max_keys idle_ttl"},
	"shaper":         {"rate max_wait", "per_key max_keys idle_ttl"},
	"breaker": {"", "consecutive_failures error_ratio error_count min_requests slow_call slow_ratio " +
		"window window_calls buckets open_for half_open_probes"},
	"throttle": {"", "multiplier min_requests window buckets"},
	"shedder":  {"", "queue max_wait"},
	"bulkhead": {"limit", "queue max_wait"},
	"shed":     {"", "on retry_after"},
}

// causes are the causes a fallback may name.
var causes = []string{"rate-limited", "circuit-open", "overloaded", "concurrency-limited", "timeout", "rejected", "error"}

// parse reads a rules file: YAML, or JSON, which the YAML parser reads as
// well. name prefixes the locations of the errors, all of which are
// returned joined.
func parse(name string, data []byte) (*spec, error) {
	p := &parser{file: name}
	// A UTF-8 byte order mark (some editors on Windows write one) is no
	// part of the rules: YAML skips it, and JSON may (RFC 8259, 8.1).
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if !utf8.Valid(data) {
		// At the line and column of the first byte that is no UTF-8 (a
		// file saved in Latin-1), as every error is.
		i := 0
		for i < len(data) {
			r, n := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		before := data[:i]
		line := bytes.Count(before, []byte("\n")) + 1
		col := utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
		return nil, fmt.Errorf("%s:%d:%d: the file is not UTF-8 (byte 0x%02x)", name, line, col, data[i])
	}
	if strings.HasSuffix(name, ".json") && !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			// At the line and column of the byte it stopped at, as the
			// YAML errors are.
			before := data[:min(max(se.Offset-1, 0), int64(len(data)))]
			line := bytes.Count(before, []byte("\n")) + 1
			col := len(before) - bytes.LastIndexByte(before, '\n')
			return nil, fmt.Errorf("%s:%d:%d: %w", name, line, col, err)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var shifts map[int][]colShift
	if strings.HasSuffix(name, ".json") {
		data, shifts = jsonForYAML(data)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty file: no guard", name)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("%s:%d: a second document: a rules file holds one", name, extra.Line)
	}
	if len(shifts) > 0 {
		unshift(&doc, shifts)
	}
	s := &spec{byName: map[string]*guardSpec{}}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	p.fields(root, "the file", func(k string, v *yaml.Node) {
		switch k {
		case "guards":
			p.guards(s, v)
		case "routes":
			p.list(v, "routes", func(n *yaml.Node) { p.route(s, n) })
		case "default":
			s.def, s.defAt = p.str(v, k), at(v)
		case "fallbacks":
			p.list(v, "fallbacks", func(n *yaml.Node) { p.fallback(s, n) })
		default:
			p.errf(v, "unknown field %q (want guards, routes, default, fallbacks)", k)
		}
	})
	if len(p.errs) == 0 {
		p.check(s)
	}
	if len(p.errs) > maxErrors {
		more := len(p.errs) - maxErrors + p.more
		p.errs = append(p.errs[:maxErrors], fmt.Errorf("%s: and %d more errors", name, more))
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return s, nil
}

type parser struct {
	file string
	errs []error
	// expanded counts the nodes the aliases followed stand for, their own
	// aliases' included; sizes holds each anchored node's count.
	expanded int
	sizes    map[*yaml.Node]int
	more     int // errors past maxErrors+1, not kept
}

// maxExpanded bounds the nodes aliases may stand for in one file: anchors
// share a value (a rate, a guard's key, a list of routes) among many, and
// a file of
// nested aliases ("billion laughs") must not make the parser read more
// than a file of this many nodes would.
const maxExpanded = 100_000

// maxErrors is how many errors a file's refusal lists.
const maxErrors = 100

// deref returns the node n stands for: n itself, or the node an alias
// names. Past maxExpanded nodes stood for, an alias of a mapping or a list
// stands for an empty one, and the file is refused.
func (p *parser) deref(n *yaml.Node) *yaml.Node {
	if n.Kind != yaml.AliasNode || n.Alias == nil {
		return n
	}
	a := n.Alias
	if p.expanded > maxExpanded { // said once, when it went past
		return &yaml.Node{Kind: a.Kind, Tag: a.Tag, Value: a.Value, Line: a.Line, Column: a.Column}
	}
	p.expanded += p.size(a, 0)
	if p.expanded > maxExpanded {
		p.errf(n, "aliases stand for more than %d nodes: the file is refused", maxExpanded)
		return &yaml.Node{Kind: a.Kind, Tag: a.Tag, Line: a.Line, Column: a.Column}
	}
	return a
}

// size returns the nodes n stands for, its aliases' included, at most
// past maxExpanded.
func (p *parser) size(n *yaml.Node, depth int) int {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if c, ok := p.sizes[n]; ok {
		return c
	}
	if depth > 100 { // aliases of aliases this deep are refused anyway
		return maxExpanded + 1
	}
	c := 1
	for _, k := range n.Content {
		c += p.size(k, depth+1)
		if c > maxExpanded {
			c = maxExpanded + 1
			break
		}
	}
	if p.sizes == nil {
		p.sizes = map[*yaml.Node]int{}
	}
	p.sizes[n] = c
	return c
}

func (p *parser) errf(n *yaml.Node, format string, args ...any) {
	if len(p.errs) > maxErrors {
		p.more++ // counted, not kept: parse says how many
		return
	}
	p.errs = append(p.errs, fmt.Errorf("%s:%d:%d: %s", p.file, n.Line, n.Column, fmt.Sprintf(format, args...)))
}

// fields calls fn with each key of the mapping n and its value; a key
// given twice is an error.
func (p *parser) fields(n *yaml.Node, what string, fn func(k string, v *yaml.Node)) {
	n = p.deref(n)
	if n.Kind != yaml.MappingNode {
		p.errf(n, "%s must be a mapping", what)
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.errf(k, "a key of %s is not a string", what)
			continue
		}
		if k.Tag == "!!merge" {
			p.errf(k, "a merge key (<<) in %s: merge keys are not supported; repeat the fields (an alias may share one value)", what)
			continue
		}
		if line, dup := seen[k.Value]; dup {
			p.errf(k, "%q given twice in %s (first on line %d)", k.Value, what, line)
			continue
		}
		seen[k.Value] = k.Line
		fn(k.Value, v)
	}
}

func (p *parser) list(n *yaml.Node, what string, fn func(*yaml.Node)) {
	n = p.deref(n)
	if n.Kind != yaml.SequenceNode {
		p.errf(n, "%s must be a list", what)
		return
	}
	for _, c := range n.Content {
		fn(c)
	}
}

func (p *parser) scalar(n *yaml.Node, what string) bool {
	if a := p.deref(n); a != n && a.Kind == yaml.ScalarNode {
		line, col := n.Line, n.Column
		*n = *a // read as the value it names, where it is named
		n.Line, n.Column = line, col
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errf(n, "%s must be a single value", what)
		return false
	}
	return true
}

func (p *parser) str(n *yaml.Node, what string) string {
	if !p.scalar(n, what) {
		return ""
	}
	if n.Value == "" {
		p.errf(n, "%s is empty", what)
	}
	return n.Value
}

func (p *parser) boolean(n *yaml.Node, what string) bool {
	if !p.scalar(n, what) {
		return false
	}
	b, err := strconv.ParseBool(n.Value)
	if err != nil || n.Tag != "!!bool" {
		p.errf(n, "%s: %q is not true or false", what, n.Value)
	}
	return b
}

// count parses a whole number of at least min.
func (p *parser) count(n *yaml.Node, what string, min int64) int64 {
	if !p.scalar(n, what) {
		return 0
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil || n.Tag != "!!int" { // "5", quoted, is a string, as "true" is
		p.errf(n, "%s: %q is not a whole number", what, n.Value)
		return 0
	}
	if v < min {
		p.errf(n, "%s: %d is less than %d", what, v, min)
	}
	return v
}

func (p *parser) integer(n *yaml.Node, what string, min int64) int {
	v := p.count(n, what, min)
	if v > math.MaxInt32 {
		p.errf(n, "%s: %d is too large", what, v)
		return 0
	}
	return int(v)
}

// ratio parses a number in (0, 1].
func (p *parser) ratio(n *yaml.Node, what string) float64 {
	if !p.scalar(n, what) {
		return 0
	}
	v, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || !number(n) || !(v > 0 && v <= 1) {
		p.errf(n, "%s: %q is not a ratio in (0, 1]", what, n.Value)
		return 0
	}
	return v
}

// number reports whether n is written as a number, not a quoted string.
func number(n *yaml.Node) bool { return n.Tag == "!!int" || n.Tag == "!!float" }

// float parses a number of at least min.
func (p *parser) float(n *yaml.Node, what string, min float64) float64 {
	if !p.scalar(n, what) {
		return 0
	}
	v, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || !number(n) || math.IsNaN(v) || math.IsInf(v, 0) || v < min {
		p.errf(n, "%s: %q is not a number of at least %v", what, n.Value, min)
		return 0
	}
	return v
}

// duration parses a positive Go duration ("250ms", "2s", "1m").
func (p *parser) duration(n *yaml.Node, what string) time.Duration {
	if !p.scalar(n, what) {
		return 0
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		p.errf(n, "%s: %q is not a duration (such as 250ms, 2s, 1m)", what, n.Value)
		return 0
	}
	if d <= 0 {
		p.errf(n, "%s: %v is not positive", what, d)
	}
	return d
}

// rate parses "count/period": 100/s, 5/min, 1000/h, 3/250ms.
func (p *parser) rate(n *yaml.Node, what string) ratelimit.Rate {
	if !p.scalar(n, what) {
		return ratelimit.Rate{}
	}
	c, per, ok := strings.Cut(n.Value, "/")
	if !ok {
		p.errf(n, "%s: %q is not count/period (such as 100/s, 5/min)", what, n.Value)
		return ratelimit.Rate{}
	}
	count, err := strconv.ParseInt(strings.TrimSpace(c), 10, 64)
	if err != nil {
		p.errf(n, "%s: %q is not a whole number", what, c)
		return ratelimit.Rate{}
	}
	if count < 1 {
		p.errf(n, "%s: the count %d is not positive", what, count)
	}
	per = strings.TrimSpace(per)
	var period time.Duration
	switch per {
	case "s", "sec", "second":
		period = time.Second
	case "m", "min", "minute":
		period = time.Minute
	case "h", "hour":
		period = time.Hour
	default:
		period, err = time.ParseDuration(per)
		if err != nil || period <= 0 {
			p.errf(n, "%s: the period %q is not s, min, h or a positive duration", what, per)
		}
	}
	return ratelimit.Rate{Count: count, Period: period}
}

// maxShadowed is how many leading policies of a chain a Guard can shadow.
const maxShadowed = 64

func (p *parser) guards(s *spec, n *yaml.Node) {
	p.fields(n, "guards", func(name string, v *yaml.Node) {
		g := &guardSpec{name: name, at: at(v)}
		if name == "" {
			p.errf(v, "a guard needs a name")
		}
		if name == "none" {
			p.errf(v, "a guard may not be named \"none\": a route mapped to none is unguarded")
		}
		p.fields(v, "guard "+strconv.Quote(name), func(k string, v *yaml.Node) {
			switch k {
			case "timeout":
				g.timeout = p.duration(v, k)
			case "shadow":
				g.shadow = p.boolean(v, k)
			case "key":
				g.key = p.key(v)
			case "policies":
				p.list(v, "policies", func(n *yaml.Node) {
					if pol := p.policy(n); pol != nil {
						g.policies = append(g.policies, pol)
					}
				})
			default:
				p.errf(v, "guard %q: unknown field %q (want policies, key, timeout, shadow)", name, k)
			}
		})
		// A Guard can shadow the first 64 policies of its chain only: a
		// policy past them declared in shadow mode is refused here, where
		// the Guard would refuse it only after the rules in force had
		// begun to change.
		for i, pol := range g.policies {
			if i >= maxShadowed && pol.shadow {
				p.errf(v, "guard %q: policy %q is policy %d of the chain; only the first %d can be shadowed", name, pol.name, i+1, maxShadowed)
				break
			}
		}
		s.guards = append(s.guards, g)
		s.byName[name] = g
	})
}

func (p *parser) key(n *yaml.Node) *keySpec {
	k := &keySpec{}
	from := 0
	p.fields(n, "key", func(f string, v *yaml.Node) {
		switch f {
		case "header":
			k.header, from = p.str(v, f), from+1
			if !httpguts.ValidHeaderFieldName(k.header) {
				// No request carries it: every one would share one key.
				p.errf(v, "header: %q is no header name a request can carry", k.header)
			}
		case "cookie":
			k.cookie, from = p.str(v, f), from+1
			if !httpguts.ValidHeaderFieldName(k.cookie) { // a token, as a cookie's name is
				p.errf(v, "cookie: %q is no cookie name a request can carry", k.cookie)
			}
		case "ip":
			k.ip, from = true, from+1
			if v = p.deref(v); v.Kind == yaml.ScalarNode && (v.Tag == "!!null" || v.Value == "true") {
				return
			}
			p.fields(v, "ip", func(f string, v *yaml.Node) {
				switch f {
				case "trusted_proxies":
					p.list(v, f, func(n *yaml.Node) { k.proxies = append(k.proxies, p.str(n, f)) })
				case "proxy_headers":
					p.list(v, f, func(n *yaml.Node) { k.proxyHeaders = append(k.proxyHeaders, p.str(n, f)) })
				case "ipv4_prefix":
					k.v4 = p.integer(v, f, 1)
				case "ipv6_prefix":
					k.v6 = p.integer(v, f, 1)
				default:
					p.errf(v, "ip: unknown field %q (want trusted_proxies, proxy_headers, ipv4_prefix, ipv6_prefix)", f)
				}
			})
		case "missing":
			switch m := p.str(v, f); m {
			case "reject":
				k.reject = true
			case "shared":
			default:
				p.errf(v, "missing: %q is not reject or shared", m)
			}
		default:
			p.errf(v, "key: unknown field %q (want header, cookie, ip, missing)", f)
		}
	})
	if from != 1 {
		p.errf(n, "key: give exactly one of header, cookie, ip")
	}
	if len(k.proxyHeaders) > 0 && len(k.proxies) == 0 {
		p.errf(n, "key: ip: proxy_headers without trusted_proxies: the fields are read only from a trusted proxy, and none is")
	}
	return k
}

func (p *parser) policy(n *yaml.Node) *policySpec {
	pol := &policySpec{at: at(n)}
	given := map[string]*yaml.Node{}
	p.fields(n, "a policy", func(k string, v *yaml.Node) {
		given[k] = v
		switch k {
		case "name":
			pol.name = p.str(v, k)
		case "kind":
			pol.kind = p.str(v, k)
		case "shadow":
			pol.shadow = p.boolean(v, k)
		case "store":
			if pol.store = p.str(v, k); pol.store != "redis" && pol.store != "local" {
				p.errf(v, "store: %q is not local or redis", pol.store)
			}
			if pol.store == "local" {
				pol.store = ""
			}
		case "fail":
			if pol.fail = p.str(v, k); pol.fail != "open" && pol.fail != "closed" && pol.fail != "local" {
				p.errf(v, "fail: %q is not open, closed or local", pol.fail)
			}
		case "instances":
			pol.instances = p.integer(v, k, 1)
		case "per_key":
			pol.perKey = p.boolean(v, k)
		case "max_keys":
			pol.maxKeys = p.integer(v, k, 1)
		case "idle_ttl":
			pol.idleTTL = p.duration(v, k)
		case "rate":
			pol.rate = p.rate(v, k)
		case "burst":
			pol.burst = p.count(v, k, 1)
		case "limit":
			pol.limit = p.count(v, k, 1)
		case "capacity":
			pol.capacity = p.count(v, k, 1)
		case "window":
			pol.window = p.duration(v, k)
			pol.shape++
		case "buckets":
			pol.buckets = p.integer(v, k, 1)
		case "max_wait":
			pol.maxWait = p.duration(v, k)
		case "warm_up":
			pol.warmUp = p.duration(v, k)
		case "cold_factor":
			pol.coldFactor = p.count(v, k, 2)
		case "consecutive_failures":
			pol.consecutive = p.integer(v, k, 1)
		case "error_ratio":
			pol.errorRatio = p.ratio(v, k)
		case "error_count":
			pol.errorCount = p.integer(v, k, 1)
		case "slow_call":
			pol.slowCall = p.duration(v, k)
		case "slow_ratio":
			pol.slowRatio = p.ratio(v, k)
		case "min_requests":
			pol.minRequests = p.integer(v, k, 0) // a throttle's may be 0; a breaker's at least 1 (below)
		case "window_calls":
			pol.windowCalls = p.integer(v, k, 1)
			pol.shape++
		case "open_for":
			pol.openFor = p.duration(v, k)
		case "half_open_probes":
			pol.halfOpen = p.integer(v, k, 1)
		case "multiplier":
			pol.multiplier = p.float(v, k, 1)
		case "queue":
			pol.queue = p.integer(v, k, 0)
		case "on":
			pol.on = p.boolean(v, k)
		case "retry_after":
			pol.retryAfter = p.duration(v, k)
		default:
			p.errf(v, "unknown policy field %q", k)
		}
	})
	if pol.name == "" {
		p.errf(n, "a policy needs a name")
		return nil
	}
	kind, ok := kinds[pol.kind]
	if !ok && pol.kind == "" {
		p.errf(n, "policy %q has no kind (want %s)", pol.name, strings.Join(kindNames(), ", "))
		return nil
	}
	if !ok {
		p.errf(n, "policy %q: unknown kind %q (want %s)", pol.name, pol.kind, strings.Join(kindNames(), ", "))
		return nil
	}
	may := strings.Fields(kind.need + " " + kind.may + " name kind shadow")
	for f, v := range given {
		if !slices.Contains(may, f) {
			p.errf(v, "policy %q: a %s takes no %s", pol.name, pol.kind, f)
		}
	}
	for f := range strings.FieldsSeq(kind.need) {
		if given[f] == nil {
			p.errf(n, "policy %q: a %s needs %s", pol.name, pol.kind, f)
		}
	}
	p.policyRules(n, pol, given)
	return pol
}

// policyRules checks what the kinds table cannot say: which fields go
// together.
func (p *parser) policyRules(n *yaml.Node, pol *policySpec, given map[string]*yaml.Node) {
	if pol.maxKeys > 0 && !pol.perKey {
		p.errf(given["max_keys"], "policy %q: max_keys needs per_key: true", pol.name)
	}
	if pol.idleTTL > 0 && !pol.perKey {
		p.errf(given["idle_ttl"], "policy %q: idle_ttl needs per_key: true", pol.name)
	}
	if given["fail"] != nil && pol.store != "redis" {
		p.errf(given["fail"], "policy %q: fail needs store: redis", pol.name)
	}
	if (pol.fail == "local") != (given["instances"] != nil) {
		p.errf(n, "policy %q: fail: local and instances go together (the local share is the limit divided by the instances)", pol.name)
	}
	if pol.store == "redis" && pol.perKey {
		p.errf(given["per_key"], "policy %q: a Redis limit keys itself by the request's key; leave per_key out", pol.name)
	}
	switch pol.kind {
	case "breaker":
		if pol.shape > 1 {
			p.errf(n, "policy %q: give window (a rolling window) or window_calls (the last n calls), not both", pol.name)
		}
		needMin := pol.errorRatio > 0 || pol.errorCount > 0 || pol.slowCall > 0
		if needMin && given["min_requests"] != nil && pol.minRequests < 1 {
			p.errf(given["min_requests"], "min_requests: %d is less than 1", pol.minRequests)
		} else if needMin != (given["min_requests"] != nil) {
			p.errf(n, "policy %q: min_requests goes with error_ratio, error_count or slow_call, and only with them", pol.name)
		}
		if (pol.slowCall > 0) != (pol.slowRatio > 0) {
			p.errf(n, "policy %q: slow_call and slow_ratio go together", pol.name)
		}
		if pol.buckets > 0 && pol.window == 0 {
			p.errf(given["buckets"], "policy %q: buckets needs window", pol.name)
		}
	case "throttle":
		if pol.buckets > 0 && pol.window == 0 {
			p.errf(given["buckets"], "policy %q: buckets needs window", pol.name)
		}
	case "sliding-window":
		if pol.buckets == 0 {
			pol.buckets = 10
		}
	case "shedder", "bulkhead":
		if (given["queue"] != nil) != (given["max_wait"] != nil) {
			p.errf(n, "policy %q: queue and max_wait go together", pol.name)
		}
	}
}

func kindNames() []string {
	var ks []string
	for k := range kinds {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func (p *parser) route(s *spec, n *yaml.Node) {
	r := routeSpec{at: at(n)}
	p.fields(n, "a route", func(k string, v *yaml.Node) {
		switch k {
		case "route":
			r.pattern = p.str(v, k)
		case "guard":
			r.guard = p.str(v, k)
		default:
			p.errf(v, "route: unknown field %q (want route, guard)", k)
		}
	})
	if r.pattern == "" || r.guard == "" {
		p.errf(n, "a route needs route and guard")
		return
	}
	if _, err := middleware.NewRoutes(middleware.RouteTo(r.pattern, nil)); err != nil {
		p.errf(n, "route %q: %v", r.pattern, err)
	}
	s.routes = append(s.routes, r)
}

func (p *parser) fallback(s *spec, n *yaml.Node) {
	f := fallbackSpec{at: at(n)}
	p.fields(n, "a fallback", func(k string, v *yaml.Node) {
		switch k {
		case "route":
			f.route = p.str(v, k)
		case "cause":
			if f.cause = p.str(v, k); !slices.Contains(causes, f.cause) {
				p.errf(v, "cause: %q is not one of %s", f.cause, strings.Join(causes, ", "))
			}
		case "status":
			// A final status: a 1xx is informational, and net/http would
			// follow it with a 200.
			if f.status = p.integer(v, k, 0); f.status != 0 && (f.status < 200 || f.status > 599) {
				p.errf(v, "status: %d is not the status of a final answer (200 to 599)", f.status)
			}
		case "headers":
			f.headers = http.Header{}
			lines := map[string]int{}
			p.fields(v, "headers", func(h string, v *yaml.Node) {
				// Names are case-insensitive: one given twice in two cases
				// would have the last win, unseen.
				c := http.CanonicalHeaderKey(h)
				if line, dup := lines[c]; dup {
					p.errf(v, "headers: %q given twice (first on line %d)", c, line)
					return
				}
				lines[c] = v.Line
				val := p.str(v, h)
				// net/http would drop a field of a name it cannot send, and
				// send a value's line breaks as spaces.
				if !httpguts.ValidHeaderFieldName(h) {
					p.errf(v, "headers: %q is no header name", h)
				} else if !httpguts.ValidHeaderFieldValue(val) {
					p.errf(v, "headers: %s: the value holds a character a header cannot send (a line break, a control character)", c)
				}
				f.headers.Set(h, val)
			})
		case "body":
			if p.scalar(v, k) {
				f.body = v.Value
			}
		default:
			p.errf(v, "fallback: unknown field %q (want route, cause, status, headers, body)", k)
		}
	})
	if f.cause == "" || f.status == 0 {
		p.errf(n, "a fallback needs cause and status")
	}
	if f.body != "" && (f.status == http.StatusNoContent || f.status == http.StatusNotModified) {
		p.errf(n, "fallback: a %d answer has no body: net/http would drop it", f.status)
	}
	// The body's framing is net/http's to set: a Content-Length other than
	// the body's cuts the answer short or leaves the client waiting.
	if cl, ok := f.headers["Content-Length"]; ok && cl[0] != strconv.Itoa(len(f.body)) {
		p.errf(n, "fallback: headers: Content-Length %s is not the body's length (%d): leave it out, net/http sets it", cl[0], len(f.body))
	}
	for _, h := range []string{"Transfer-Encoding", "Connection", "Keep-Alive", "Upgrade", "Trailer"} {
		if _, ok := f.headers[h]; ok {
			p.errf(n, "fallback: headers: %s is the connection's, net/http's to set", h)
		}
	}
	s.fallbacks = append(s.fallbacks, f)
}

// check checks what spans the file: names that must be unique, and names
// that must refer to something.
func (p *parser) check(s *spec) {
	node := func(p pos) *yaml.Node { return &yaml.Node{Line: p.line, Column: p.col} }
	if len(s.guards) == 0 {
		p.errs = append(p.errs, fmt.Errorf("%s: no guard", p.file))
	}
	names := map[string]int{}
	for _, g := range s.guards {
		inGuard := map[string]*policySpec{}
		for _, pol := range g.policies {
			if line, dup := names[pol.name]; dup {
				p.errf(node(pol.at), "policy name %q is used twice (first on line %d): a name keeps a policy's state across reloads, so it must be unique", pol.name, line)
			}
			names[pol.name] = pol.at.line
			// The Guard tells its policies apart by the names they go by
			// in it (a shadow mode is set by that name).
			if other := inGuard[nameInGuard(pol)]; other != nil && other.name != pol.name {
				p.errf(node(pol.at), "policy %q goes by %q in guard %q, as policy %q (line %d) does: rename one", pol.name, nameInGuard(pol), g.name, other.name, other.at.line)
			}
			inGuard[nameInGuard(pol)] = pol
			s.policies = append(s.policies, pol)
			if pol.perKey && g.key == nil {
				p.errf(node(pol.at), "policy %q is per_key but guard %q has no key", pol.name, g.name)
			}
		}
	}
	guard := func(at pos, name string) {
		if _, ok := s.byName[name]; !ok && name != "none" {
			p.errf(node(at), "no guard named %q", name)
		}
	}
	routes := map[string]int{}
	unguarded := map[string]bool{}
	for _, r := range s.routes {
		if r.guard == "none" {
			unguarded[r.pattern] = true
		}
		if line, dup := routes[r.pattern]; dup {
			p.errf(node(r.at), "route %q is given twice (first on line %d)", r.pattern, line)
		}
		routes[r.pattern] = r.at.line
		guard(r.at, r.guard)
	}
	if s.def != "" {
		guard(s.defAt, s.def)
	}
	type fk struct{ route, cause string }
	fbs := map[fk]int{}
	for _, f := range s.fallbacks {
		if _, ok := routes[f.route]; !ok && f.route != "" {
			p.errf(node(f.at), "fallback for route %q, which no route lists", f.route)
		} else if unguarded[f.route] {
			p.errf(node(f.at), "fallback for route %q, which is unguarded (none): no rejection or failure of its is answered", f.route)
		}
		if line, dup := fbs[fk{f.route, f.cause}]; dup {
			p.errf(node(f.at), "a second fallback for route %q and cause %s (first on line %d)", f.route, f.cause, line)
		}
		fbs[fk{f.route, f.cause}] = f.at.line
	}
}

// jsonForYAML returns data, valid JSON, with what its strings hold that
// JSON reads and YAML does not written as YAML reads it: a slash escaped as
// backslash-slash (PHP's json_encode writes one for every slash) as the
// slash; a surrogate pair of \u escapes as the \U escape of the character
// it stands for, and a lone one as U+FFFD, as encoding/json reads it; and
// the characters YAML takes for line breaks or refuses (U+0085, U+2028,
// U+2029, DEL and the C1 controls) as \u escapes. Lines stay where they
// were; the columns that moved on a line are in the shifts returned.
func jsonForYAML(data []byte) ([]byte, map[int][]colShift) {
	out := make([]byte, 0, len(data))
	shifts := map[int][]colShift{}
	line, col := 1, 1 // of out
	shift := func(by int) { shifts[line] = append(shifts[line], colShift{col, by}) }
	emit := func(b ...byte) {
		for _, c := range b {
			out = append(out, c)
			if c == '\n' {
				line, col = line+1, 1
			} else if c&0xC0 != 0x80 {
				col++
			}
		}
	}
	in := false // within a string
	for i := 0; i < len(data); {
		c := data[i]
		if !in || c == '"' {
			in = in != (c == '"')
			emit(c)
			i++
			continue
		}
		if c == '\\' && i+1 < len(data) {
			switch data[i+1] {
			case '/':
				emit('/')
				shift(1)
				i += 2
				continue
			case 'u':
				hi, ok := hex4(data[i+2:])
				if ok && hi >= 0xD800 && hi < 0xE000 {
					lo, pair := uint64(0), false
					if hi < 0xDC00 && i+7 < len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
						lo, pair = hex4(data[i+8:])
						pair = pair && lo >= 0xDC00 && lo < 0xE000
					}
					if pair {
						emit(fmt.Appendf(nil, `\U%08X`, 0x10000+(hi-0xD800)<<10+(lo-0xDC00))...)
						shift(2)
						i += 12
					} else {
						emit([]byte(`\uFFFD`)...)
						i += 6
					}
					continue
				}
			}
			emit(c, data[i+1])
			i += 2
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == 0x7F || r >= 0x80 && r <= 0x9F || r == 0x2028 || r == 0x2029 {
			emit(fmt.Appendf(nil, `\u%04X`, r)...)
			shift(-5)
		} else {
			emit(data[i : i+size]...)
		}
		i += size
	}
	return out, shifts
}

// colShift says that, on a line of the text jsonForYAML returns, the
// columns from col on are by fewer than in the file (more when by < 0).
type colShift struct{ col, by int }

// unshift puts the columns of the nodes of n back where they are in the
// file, before jsonForYAML moved them.
func unshift(n *yaml.Node, shifts map[int][]colShift) {
	c := n.Column
	for _, s := range shifts[n.Line] {
		if s.col <= c {
			n.Column += s.by
		}
	}
	for _, k := range n.Content {
		unshift(k, shifts)
	}
}

// hex4 reads four hex digits at the start of b.
func hex4(b []byte) (uint64, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 32)
	return n, err == nil
}
