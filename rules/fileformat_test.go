package rules

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A fallback whose headers declare a Content-Length its body does not have
// would be sent broken on the wire (net/http cuts the connection short): the
// file is refused with the fallback's line, as are the connection's fields.
func TestAFallbackMayNotSetItsFraming(t *testing.T) {
	const head = "guards:\n  api:\n    policies:\n      - {name: off, kind: shed, on: true}\ndefault: api\nfallbacks:\n"
	_, err := loadFile(t, "rules.yaml", head+"  - {cause: rejected, status: 200, headers: {Content-Length: \"50\"}, body: \"[]\"}\n")
	require.ErrorContains(t, err, "rules.yaml:7:")
	assert.ErrorContains(t, err, "Content-Length 50 is not the body's length (2)")
	_, err = loadFile(t, "rules.yaml", head+"  - {cause: rejected, status: 200, headers: {Transfer-Encoding: chunked}, body: \"[]\"}\n")
	assert.ErrorContains(t, err, "Transfer-Encoding")
	_, err = loadFile(t, "rules.yaml", head+"  - {cause: rejected, status: 200, headers: {Content-Length: \"2\"}, body: \"[]\"}\n")
	assert.NoError(t, err, "the body's own length")
}

// The same rules load from JSON as from YAML, with a UTF-8 byte order mark
// (PowerShell's Set-Content -Encoding UTF8, Notepad) too.
func TestAByteOrderMarkIsSkipped(t *testing.T) {
	_, err := loadFile(t, "rules.yaml", "\ufeffguards:\n  api:\n    policies:\n      - {name: a, kind: token-bucket, rate: 1/s, burst: 1}\n")
	require.NoError(t, err, "YAML with a BOM")
	_, err = loadFile(t, "rules.json", "\ufeff{\"guards\": {\"api\": {\"policies\": [{\"name\": \"a\", \"kind\": \"token-bucket\", \"rate\": \"1/s\", \"burst\": 1}]}}}")
	assert.NoError(t, err, "the same rules as JSON with a BOM")
}

// A number given as a string is a value of the wrong type, as a quoted
// boolean is: refused with its place.
func TestAQuotedNumberIsRefused(t *testing.T) {
	_, err := loadFile(t, "rules.yaml", "guards:\n  api:\n    policies:\n      - {name: a, kind: shed, on: \"true\"}\n")
	require.ErrorContains(t, err, "on:", "a quoted boolean")
	_, err = loadFile(t, "rules.json", "{\"guards\": {\"api\": {\"policies\": [{\"name\": \"a\", \"kind\": \"token-bucket\", \"rate\": \"1/s\", \"burst\": \"5\"}]}}}")
	assert.ErrorContains(t, err, `rules.json:1:`)
	assert.ErrorContains(t, err, `burst: "5" is not a whole number`)
	_, err = loadFile(t, "rules.yaml", "guards:\n  api:\n    policies:\n      - {name: b, kind: breaker, error_ratio: \"0.5\", min_requests: 10}\n")
	assert.ErrorContains(t, err, "error_ratio")
}

// YAML merge keys are refused with an error that says so, not taken for an
// unknown field.
func TestAMergeKeyIsRefusedPlainly(t *testing.T) {
	_, err := loadFile(t, "rules.yaml", "guards:\n  api:\n    policies:\n"+
		"      - &std {name: a, kind: token-bucket, rate: 100/s, burst: 10}\n"+
		"      - {<<: *std, name: b}\ndefault: api\n")
	require.Error(t, err)
	assert.ErrorContains(t, err, "rules.yaml:5:10: a merge key (<<)")
	assert.ErrorContains(t, err, "merge keys are not supported")
	assert.NotContains(t, err.Error(), "unknown policy field")
	assert.NotContains(t, err.Error(), `unknown kind ""`)
}
