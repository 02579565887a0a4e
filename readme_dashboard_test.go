package sluice_test

import (
	"os"
	"strings"
	"testing"
)

// The setup lines of README.md's "Dashboard" are those of the dashboard's
// ExampleNew, which runs, and the picture it shows is in the tree.
func TestReadmeDashboardIsTheExample(t *testing.T) {
	section := readmeSection(t, "## Dashboard")
	setup := exampleLines(t, "observe/dashboard/example_test.go",
		"\tdash, err := dashboard.New()", "\tif err != nil {\n\t\tpanic(err)\n\t}\n\tdefer g.Close()")
	if !strings.Contains(section, "```go\n"+setup+"```\n") {
		t.Errorf("README.md's Dashboard does not show ExampleNew's setup:\n%s", setup)
	}
	if _, err := os.Stat("docs/dashboard.png"); err != nil || !strings.Contains(section, "](docs/dashboard.png)") {
		t.Errorf("README.md's Dashboard shows no docs/dashboard.png: %v", err)
	}
}

// readmeSection returns README.md from the heading given to the next one.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), heading+"\n")
	if !ok {
		t.Fatalf("README.md has no %q", heading)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i+1]
	}
	return section
}

// exampleLines returns the lines of file from the one starting with from up
// to the one starting with to, one tab less indented.
func exampleLines(t *testing.T, file, from, to string) string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(src), from)
	body, _, ok2 := strings.Cut(rest, to)
	if !ok || !ok2 {
		t.Fatalf("%s: no lines from %q to %q", file, from, to)
	}
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimRight(from+body, "\n"), "\n") {
		out.WriteString(strings.TrimPrefix(line, "\t"))
		out.WriteByte('\n')
	}
	return out.String()
}
