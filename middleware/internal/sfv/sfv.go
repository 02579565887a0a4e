// Package sfv parses the subset of RFC 8941 structured field Lists that the
// RateLimit and RateLimit-Policy fields use, so that tests can read the
// adapters' header fields back as structured values rather than compare
// strings.
package sfv

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Item is one member of a List: a bare item (a string or a token) and its
// parameters, which hold integers, strings, tokens or booleans.
type Item struct {
	Value  string
	Params map[string]any
}

// Int returns the integer parameter key, and whether it is present and an
// integer.
func (it Item) Int(key string) (int64, bool) {
	v, ok := it.Params[key].(int64)
	return v, ok
}

// ParseList parses a structured field List of strings or tokens with
// parameters.
func ParseList(s string) ([]Item, error) {
	p := &parser{s: s}
	var out []Item
	p.skipSP()
	if p.done() {
		return nil, nil
	}
	for {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		out = append(out, it)
		p.skipOWS()
		if p.done() {
			return out, nil
		}
		if p.s[p.i] != ',' {
			return nil, fmt.Errorf("sfv: expected ',' at %d in %q", p.i, s)
		}
		p.i++
		p.skipOWS()
		if p.done() {
			return nil, errors.New("sfv: trailing comma")
		}
	}
}

type parser struct {
	s string
	i int
}

func (p *parser) done() bool { return p.i >= len(p.s) }

func (p *parser) skipSP() {
	for !p.done() && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *parser) skipOWS() {
	for !p.done() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *parser) item() (Item, error) {
	v, err := p.bare()
	if err != nil {
		return Item{}, err
	}
	s, ok := v.(string)
	if !ok {
		return Item{}, fmt.Errorf("sfv: item %v is not a string or token", v)
	}
	it := Item{Value: s, Params: map[string]any{}}
	for !p.done() && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		k := p.key()
		if k == "" {
			return Item{}, fmt.Errorf("sfv: empty parameter key at %d", p.i)
		}
		var pv any = true
		if !p.done() && p.s[p.i] == '=' {
			p.i++
			if pv, err = p.bare(); err != nil {
				return Item{}, err
			}
		}
		it.Params[k] = pv
	}
	return it, nil
}

// key reads a parameter key: a lowercase letter or '*', then lowercase
// letters, digits, '_', '-', '.' or '*' (RFC 8941 §3.1.2); "" when none
// starts here.
func (p *parser) key() string {
	if p.done() || !(p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] == '*') {
		return ""
	}
	start := p.i
	for !p.done() {
		c := p.s[p.i]
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.' || c == '*' {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i]
}

func (p *parser) bare() (any, error) {
	if p.done() {
		return nil, errors.New("sfv: unexpected end")
	}
	c := p.s[p.i]
	switch {
	case c == '"':
		p.i++
		var b strings.Builder
		for !p.done() {
			c := p.s[p.i]
			p.i++
			switch {
			case c == '\\':
				if p.done() || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
					return nil, errors.New("sfv: bad escape")
				}
				b.WriteByte(p.s[p.i])
				p.i++
			case c == '"':
				return b.String(), nil
			case c < 0x20 || c > 0x7e:
				return nil, fmt.Errorf("sfv: character %#x in string", c)
			default:
				b.WriteByte(c)
			}
		}
		return nil, errors.New("sfv: unterminated string")
	case c == '-' || (c >= '0' && c <= '9'):
		start := p.i
		p.i++
		for !p.done() && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		digits := p.i - start
		if c == '-' {
			digits--
		}
		if digits > 15 { // RFC 8941 §3.3.1; the sign does not count
			return nil, errors.New("sfv: integer too long")
		}
		return strconv.ParseInt(p.s[start:p.i], 10, 64)
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return p.s[p.i-1] == '1', nil
		}
		return nil, errors.New("sfv: bad boolean")
	case c == '*' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'):
		start := p.i
		for !p.done() && strings.IndexByte(":/!#$%&'*+-.^_`|~", p.s[p.i]) >= 0 ||
			!p.done() && (p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] >= 'A' && p.s[p.i] <= 'Z' || p.s[p.i] >= '0' && p.s[p.i] <= '9') {
			p.i++
		}
		return p.s[start:p.i], nil
	}
	return nil, fmt.Errorf("sfv: unexpected %q at %d", c, p.i)
}
