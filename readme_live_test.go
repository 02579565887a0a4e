package sluice_test

import (
	"os"
	"strings"
	"testing"
)

// README.md's "Operating it live" shows the body of ExampleGuard_SetShadow,
// which runs, the countOnly observer it uses, and what it prints.
func TestReadmeOperatingLiveIsTheExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_shadow_test.go")
	if err != nil {
		t.Fatal(err)
	}
	const head = "func ExampleGuard_SetShadow() {\n"
	body, ok := strings.CutPrefix(string(src)[strings.Index(string(src), head):], head)
	end := strings.Index(body, "\t// Output:")
	if !ok || end < 0 {
		t.Fatal("ExampleGuard_SetShadow or its Output comment not found")
	}
	var want strings.Builder
	for _, line := range strings.Split(strings.TrimRight(body[:end], "\n"), "\n") {
		want.WriteString(strings.TrimPrefix(line, "\t") + "\n")
	}
	section := string(readme)
	if i := strings.Index(section, "## Operating it live"); i >= 0 {
		section = section[i:]
	}
	if !strings.Contains(section, "```go\n"+want.String()+"```\n") {
		t.Errorf("README.md's Operating it live is not the body of ExampleGuard_SetShadow:\n%s", want.String())
	}
	i := strings.Index(string(src), "type countOnly struct{}\n")
	if i < 0 {
		t.Fatal("countOnly not found")
	}
	if typ := string(src)[i:]; !strings.Contains(section, "```go\n"+typ+"```\n") {
		t.Errorf("README.md's Operating it live does not show countOnly as example_shadow_test.go declares it:\n%s", typ)
	}
	for _, line := range strings.Split(strings.TrimSpace(body[end+len("\t// Output:"):strings.Index(body, "\n}\n")]), "\n") {
		out := strings.TrimPrefix(strings.TrimSpace(line), "// ")
		if !strings.Contains(strings.ReplaceAll(section, "\n", " "), out) {
			t.Errorf("README.md's Operating it live does not say the example prints %q", out)
		}
	}
}
