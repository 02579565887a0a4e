package sluice_test

import (
	"os"
	"strings"
	"testing"
)

// exampleLines returns the lines of the Go file path from the line that
// starts with from up to the one that starts with to, unindented by a tab.
func exampleLines(t *testing.T, path, from, to string) string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	start, end := strings.Index(s, from), strings.Index(s, to)
	if start < 0 || end < start {
		t.Fatalf("%s: %q … %q not found", path, from, to)
	}
	return strings.ReplaceAll("\n"+s[start:end], "\n\t", "\n")[1:]
}

// The Retries section of README.md is the body of ExampleWithRetry up to
// the Stats it prints.
func TestReadmeRetriesIsTheExample(t *testing.T) {
	body := exampleLines(t, "example_retry_test.go", "\tpayments, err := breaker.New(", "\ts := g.Stats()")
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	if i := strings.Index(section, "## Retries"); i >= 0 {
		section = section[i:]
	}
	if !strings.Contains(section, "```go\n"+body+"```\n") {
		t.Errorf("README.md's Retries section is not the body of ExampleWithRetry:\n%s", body)
	}
}
