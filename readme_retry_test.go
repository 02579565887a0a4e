package sluice_test

import (
	"strings"
	"testing"
)

// The Retries section of README.md is the body of ExampleWithRetry up to
// the Stats it prints.
func TestReadmeRetriesIsTheExample(t *testing.T) {
	body := exampleLines(t, "example_retry_test.go", "\tpayments, err := breaker.New(", "\ts := g.Stats()")
	if section := readmeSection(t, "## Retries"); !strings.Contains(section, "```go\n"+body+"```\n") {
		t.Errorf("README.md's Retries section is not the body of ExampleWithRetry:\n%s", body)
	}
}
