package sluice_test

import (
	"os"
	"strings"
	"testing"
)

// The setup lines of README.md's "Seeing it run" are those of the Example
// functions of otelmetrics and prommetrics, which run.
func TestReadmeSeeingItRunIsTheExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	i := strings.Index(section, "## Seeing it run")
	if i < 0 {
		t.Fatal(`README.md has no section "Seeing it run"`)
	}
	section = section[i:]
	for _, file := range []string{"observe/otelmetrics/example_test.go", "observe/prommetrics/example_test.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		start := strings.Index(string(src), "\tmetrics, ")
		end := strings.Index(string(src), "\tif err != nil {\n\t\tpanic(err)\n\t}\n\tdefer g.Close()")
		if start < 0 || end < start {
			t.Fatalf("%s: the setup lines are not found", file)
		}
		var body strings.Builder
		for _, line := range strings.Split(strings.TrimRight(string(src[start:end]), "\n"), "\n") {
			body.WriteString(strings.TrimPrefix(line, "\t"))
			body.WriteByte('\n')
		}
		if !strings.Contains(section, "```go\n"+body.String()+"```\n") {
			t.Errorf("README.md's Seeing it run does not show %s's setup:\n%s", file, body.String())
		}
	}
}
