package rules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
)

// loadFile writes content to a file named name in a fresh directory and
// loads it, returning New's error; the Loader is closed at the test's end.
func loadFile(t *testing.T, name, content string) (*Loader, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	l, err := New(path, WithLogger(quietLog))
	if err == nil {
		t.Cleanup(func() { _ = l.Close() })
	}
	return l, err
}

// A rules file that is valid JSON loads, "\/" (PHP's json_encode writes
// one for every "/") and surrogate pairs (an emoji past the BMP) among its
// escapes, which YAML lacks.
func TestValidJSONWithEscapesYAMLLacksLoads(t *testing.T) {
	require.True(t, json.Valid([]byte(`{"a": "<\/p>\ud83d\ude00"}`)))
	const file = `{
  "guards": {"api": {"policies": [{"name": "off", "kind": "shed", "on": true}]}},
  "default": "api",
  "fallbacks": [{"cause": "rejected", "status": 200, "body": "<a href=\"\/help\">help<\/a> \ud83d\ude00"}]
}`
	l, err := loadFile(t, "rules.json", file)
	require.NoError(t, err, "valid JSON")
	w := get(serve(t, l), "/x")
	assert.Equal(t, `<a href="/help">help</a> 😀`, w.Body.String())
}

// A fallback's header field that net/http cannot send is refused when the
// file loads, not dropped (an invalid name) or rewritten (CR LF in a value)
// on the wire unseen, and a body is refused with a status that has none
// (204, 304), which net/http drops.
func TestFallbackFieldsNetHTTPCannotSendAreRefused(t *testing.T) {
	const base = "guards:\n  api:\n    policies:\n      - {name: off, kind: shed, on: true}\ndefault: api\nfallbacks:\n  - %s\n"
	for _, fb := range []string{
		`{cause: rejected, status: 200, body: "[]", headers: {X-Note: "a\r\nb"}}`,
		`{cause: rejected, status: 200, headers: {"Content Type": application/json}}`,
		`{cause: rejected, status: 200, headers: {"X-Note": "a\nb"}}`,
		`{cause: rejected, status: 204, body: "gone"}`,
		`{cause: rejected, status: 304, body: "gone"}`,
	} {
		_, err := loadFile(t, "rules.yaml", strings.Replace(base, "%s", fb, 1))
		assert.Error(t, err, fb)
	}
}

// A key header or cookie name no request can carry is refused: with
// missing: shared (the default) every request would fall silently into the
// one bucket keyed "unknown", a per-client limit turned into one for all.
func TestKeyNamesNoRequestCanCarryAreRefused(t *testing.T) {
	for _, key := range []string{
		`{header: "X-API Key"}`,
		`{header: "X-API-Key:"}`,
		`{cookie: "session id"}`,
		`{cookie: "sid;"}`,
	} {
		_, err := loadFile(t, "rules.yaml", "guards:\n  api:\n    key: "+key+"\n    policies:\n"+
			"      - {name: per-client, kind: fixed-window, limit: 1, window: 1m, per_key: true}\ndefault: api\n")
		assert.Error(t, err, key)
	}
}

// The file's fallbacks are HTTP answers; Loader.Guard hands its Guard out
// "for calls made with sluice.Guard.Do or sluice.Execute". Do then returns
// nil for a call that was rejected and never ran, and for a call that
// failed: the caller is told its work was done.
func TestGuardDoIsNotToldSuccessByTheFilesHTTPFallbacks(t *testing.T) {
	l, err := loadFile(t, "rules.yaml", `
guards:
  api:
    policies:
      - {name: off, kind: shed, on: true}
  jobs:
    policies:
      - {name: jobs-limit, kind: fixed-window, limit: 100, window: 1m}
default: api
fallbacks:
  - {cause: rejected, status: 200, body: "[]"}
  - {cause: error, status: 200, body: "[]"}
`)
	require.NoError(t, err)
	g, _ := l.Guard("api")
	ran := false
	err = g.Do(context.Background(), func(context.Context) error { ran = true; return nil })
	require.False(t, ran, "the shed is on")
	assert.ErrorIs(t, err, sluice.ErrRejected, "rejected, fn never ran: Do returned %v", err)

	jobs, _ := l.Guard("jobs")
	boom := errors.New("write failed")
	err = jobs.Do(context.Background(), func(context.Context) error { return boom })
	assert.ErrorIs(t, err, boom, "the call's own failure")
}

// Status.Changes says what a reload changed, "a line per change": a guard
// whose key changed (what its per-client limits count by) is a change.
func TestStatusChangesTellAKeyChange(t *testing.T) {
	const rules = "guards:\n  api:\n    key: {header: X-Key}\n    policies:\n" +
		"      - {name: per-client, kind: fixed-window, limit: 5, window: 1m, per_key: true}\ndefault: api\n"
	var got []Status
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, rules)
	l, err := New(path, WithLogger(quietLog), OnReload(func(st Status) { got = append(got, st) }))
	require.NoError(t, err)
	defer l.Close()
	for _, to := range []string{"{ip: {}}", "{ip: {}, missing: reject}"} {
		writeRules(t, path, strings.Replace(rules, "{header: X-Key}", to, 1))
		require.NoError(t, l.Reload())
		require.NotEmpty(t, got)
		assert.NotEmpty(t, got[len(got)-1].Changes, "key → %s: the reload reported no change", to)
	}
}

// A throttle's min_requests defaults to 0, as the package doc's table says
// and breaker.WithMinThrottleRequests takes it: writing it is no error; a
// breaker's is at least 1.
func TestThrottleMinRequestsZeroIsItsDefault(t *testing.T) {
	_, err := loadFile(t, "rules.yaml", "guards:\n  api:\n    policies:\n      - {name: t, kind: throttle, min_requests: 0}\n")
	assert.NoError(t, err)
	_, err = loadFile(t, "rules.yaml", "guards:\n  api:\n    policies:\n      - {name: b, kind: breaker, error_ratio: 0.5, min_requests: 0}\n")
	assert.ErrorContains(t, err, "min_requests")
}

// jsonLine is a one-line rules file, as PHP's json_encode writes one,
// whose policy kind is unknown; body goes in its fallback's body.
func jsonLine(body string) string {
	return `{"fallbacks":[{"cause":"rejected","status":200,"body":"` + body +
		`"}],"default":"api","guards":{"api":{"policies":[{"name":"off","kind":"bogus"}]}}}`
}

// The column of an error in a JSON file is the column in the file, after a
// "\/" or a surrogate pair as after as many bytes of plain text, though
// they are rewritten for the YAML parser.
func TestJSONErrorColumnIsTheFilesAfterRewrittenEscapes(t *testing.T) {
	for _, body := range []string{`<\/p>`, `\/api\/v1\/users`, `\ud83d\ude00`} {
		_, err := parse("rules.json", []byte(jsonLine(body)))
		require.Error(t, err)
		_, plain := parse("rules.json", []byte(jsonLine(strings.Repeat("x", len(body)))))
		require.Error(t, plain)
		assert.Equal(t, plain.Error(), err.Error(), "body %s", body)
	}
}

// A lone surrogate escape is valid JSON (json.Valid, and JavaScript's
// JSON.stringify writes one for a string cut inside a pair); encoding/json
// reads it as U+FFFD, and so do the rules.
func TestJSONLoneSurrogateLoads(t *testing.T) {
	for _, body := range []string{`cut \ud83d`, `\ude00 cut`, `\ud83d\u0041`} {
		file := `{
  "guards": {"api": {"policies": [{"name": "off", "kind": "shed", "on": true}]}},
  "default": "api",
  "fallbacks": [{"cause": "rejected", "status": 200, "body": "` + body + `"}]
}`
		var v struct{ Fallbacks []struct{ Body string } }
		require.NoError(t, json.Unmarshal([]byte(file), &v))
		s, err := parse("rules.json", []byte(file))
		if assert.NoError(t, err, "valid JSON: %s", body) {
			assert.Equal(t, v.Fallbacks[0].Body, s.fallbacks[0].body)
		}
	}
}

// A JSON string may hold U+0085, U+2028 and U+2029 unescaped, which YAML
// takes for line breaks: the lines of the errors after one stay the
// file's, and a NEL is kept, not folded to a space.
func TestJSONRawUnicodeLineBreaksKeepTheirLine(t *testing.T) {
	for _, c := range []string{"\u0085", "\u2028", "\u2029"} {
		file := "{\n  \"fallbacks\": [{\"cause\": \"rejected\", \"status\": 200, \"body\": \"x" + c + "y\"}],\n" +
			"  \"default\": \"api\",\n  \"guards\": {\"api\": {\"policies\": [{\"name\": \"off\", \"kind\": \"bogus\"}]}}\n}"
		_, err := parse("rules.json", []byte(file))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "rules.json:4:", "%q", c)
	}
	file := `{
  "guards": {"api": {"policies": [{"name": "off", "kind": "shed", "on": true}]}},
  "default": "api",
  "fallbacks": [{"cause": "rejected", "status": 200, "body": "x` + "\u0085" + `y"}]
}`
	s, err := parse("rules.json", []byte(file))
	require.NoError(t, err)
	assert.Equal(t, "x\u0085y", s.fallbacks[0].body, "the body the file gives")
}

// YAML anchors share a value, a list or a mapping: an alias of each is
// read as what it names, and an error in it is told where it is used.
func TestAliasesOfValuesAndListsAreRead(t *testing.T) {
	l, err := loadFile(t, "rules.yaml", "guards:\n  api:\n    key: {ip: {trusted_proxies: &nets [10.0.0.0/8]}}\n    policies:\n"+
		"      - {name: a, kind: token-bucket, rate: &std 100/s, burst: 10}\n"+
		"      - {name: b, kind: token-bucket, rate: *std, burst: 10}\n"+
		"  web:\n    key: {ip: {trusted_proxies: *nets}}\n    policies:\n      - {name: c, kind: gcra, rate: *std, burst: 3}\ndefault: api\n")
	require.NoError(t, err)
	g, _ := l.Guard("web")
	require.Equal(t, "c", g.Policies()[0].Name())

	_, err = loadFile(t, "rules.yaml", "guards:\n  api:\n    policies:\n"+
		"      - {name: a, kind: token-bucket, rate: 100/s, burst: &n -1}\n"+
		"      - {name: b, kind: token-bucket, rate: 100/s, burst: *n}\ndefault: api\n")
	require.ErrorContains(t, err, "rules.yaml:5:59: burst: -1 is less than 1")
}

// Aliases of aliases ("billion laughs") stand for more than any file of
// rules holds: the file is refused once they stand for 100,000 nodes,
// without reading them all, and its error lists at most 100 faults.
func TestNestedAliasesAreRefusedWithinBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString("guards:\n  api:\n    policies:\n      - {name: a, kind: token-bucket, rate: 1/s, burst: 1}\ndefault: api\n")
	aliasBomb(&b, `{route: "GET /x", guard: api}`, 9)
	b.WriteString("routes: *l9\n") // 10⁹ routes
	_, err := loadFile(t, "rules.yaml", b.String())
	require.Error(t, err)
	assert.Less(t, len(err.Error()), 20_000, "the refusal of a %d-byte file is %d bytes", b.Len(), len(err.Error()))

	require.Contains(t, err.Error(), "aliases stand for more than 100000 nodes")

	// One alias of a guard of 15 policies in each of 15 guards: a
	// policy's name repeats 224 times, each an error.
	b.Reset()
	b.WriteString("guards:\n  g0: &g\n    policies:\n      - &p {name: a, kind: token-bucket, rate: 100/s, burst: 10}\n")
	for range 14 {
		b.WriteString("      - *p\n")
	}
	for i := 1; i < 15; i++ {
		fmt.Fprintf(&b, "  g%d: *g\n", i)
	}
	_, err = loadFile(t, "rules.yaml", b.String())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "more errors")
	assert.Less(t, strings.Count(err.Error(), "\n"), 110)
}

// Once aliases have stood for more than maxExpanded nodes, every alias of
// a mapping or a list after it stands for an empty one: a small file does
// not make the parser read (and keep an error for) millions of nodes.
func TestAliasesPastTheBoundAreNotFollowed(t *testing.T) {
	var b strings.Builder
	// A nested bomb, read first, takes the count past the bound.
	aliasBomb(&b, "a", 6)
	b.WriteString("routes: *l6\n")
	// Then one guard of 300 policies, aliased by 300 guards.
	const n = 300
	b.WriteString("guards:\n  g0: &g\n    policies:\n      - &p {name: a, kind: token-bucket, rate: 100/s, burst: -1}\n")
	for range n - 1 {
		b.WriteString("      - *p\n")
	}
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "  g%d: *g\n", i)
	}
	_, err := parse("rules.yaml", []byte(b.String()))
	require.Error(t, err)
	require.Contains(t, err.Error(), "aliases stand for more than 100000 nodes")
	m := regexp.MustCompile(`and (\d+) more errors`).FindStringSubmatch(err.Error())
	more := 0
	if m != nil {
		more, _ = strconv.Atoi(m[1])
	}
	t.Logf("file of %d bytes; %d errors past the first %d", b.Len(), more, maxErrors)
	require.Less(t, more, 10*n, "aliases past the bound were followed in full: %d errors kept for a %d-byte file", more, b.Len())
}

// aliasBomb writes a list anchored l0 holding leaf, then levels lists each
// of ten aliases of the one before, anchored l1 to l<levels>: the last
// stands for 10^levels copies of leaf.
func aliasBomb(b *strings.Builder, leaf string, levels int) {
	fmt.Fprintf(b, "x0: &l0 [%s]\n", leaf)
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(b, "x%d: &l%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(b, "*l%d", i-1)
		}
		b.WriteString("]\n")
	}
}
