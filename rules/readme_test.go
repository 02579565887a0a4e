package rules_test

import (
	"os"
	"strings"
	"testing"
)

// The "Operate it live" section of README.md is the body of Example from
// rules.New to the handler.
func TestReadmeOperateItLiveIsTheExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	const from, to = "\tlive, err := rules.New(", "\n\n\ttighter :="
	s := string(src)
	start, end := strings.Index(s, from), strings.Index(s, to)
	if start < 0 || end < start {
		t.Fatal("Example's body not found")
	}
	var body strings.Builder
	for _, line := range strings.Split(s[start:end], "\n") {
		body.WriteString(strings.TrimPrefix(line, "\t"))
		body.WriteByte('\n')
	}
	if !strings.Contains(string(readme), "```go\n"+body.String()+"```\n") {
		t.Errorf("README.md's Operate it live is not the body of Example:\n%s", body.String())
	}
}
