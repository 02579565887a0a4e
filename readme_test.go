package sluice_test

import (
	"os"
	"strings"
	"testing"
)

// The Quick start in README.md is the body of Example_quickStart, which runs:
// the README shows code that compiles and does what it says.
func TestReadmeQuickStartIsTheExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_quickstart_test.go")
	if err != nil {
		t.Fatal(err)
	}
	src := string(example)
	start := strings.Index(src, "func Example_quickStart() {\n")
	end := strings.Index(src, "\t// Output:")
	if start < 0 || end < start {
		t.Fatal("Example_quickStart or its Output comment not found")
	}
	var body strings.Builder
	for _, line := range strings.Split(strings.TrimRight(src[start+len("func Example_quickStart() {\n"):end], "\n"), "\n") {
		body.WriteString(strings.TrimPrefix(line, "\t"))
		body.WriteByte('\n')
	}
	section := string(readme)
	if i := strings.Index(section, "## Quick start"); i >= 0 {
		section = section[i:]
	}
	if !strings.Contains(section, "```go\n"+body.String()+"```\n") {
		t.Errorf("README.md's Quick start is not the body of Example_quickStart:\n%s", body.String())
	}
}

// The per-client section of README.md is the body of
// ExampleMiddleware_perClient up to the handler it wraps.
func TestReadmePerClientIsTheExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("middleware/http/example_perclient_test.go")
	if err != nil {
		t.Fatal(err)
	}
	src := string(example)
	start := strings.Index(src, "\tperClient, err :=")
	end := strings.Index(src, "\th := mw(")
	if start < 0 || end < start {
		t.Fatal("ExampleMiddleware_perClient's body not found")
	}
	var body strings.Builder
	for _, line := range strings.Split(strings.TrimRight(src[start:end], "\n"), "\n") {
		body.WriteString(strings.TrimPrefix(line, "\t"))
		body.WriteByte('\n')
	}
	if !strings.Contains(string(readme), "```go\n"+body.String()+"h := mw(handler)\n```\n") {
		t.Errorf("README.md's per-client section is not the body of ExampleMiddleware_perClient:\n%s", body.String())
	}
}
