package sluice_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The core packages import nothing outside the standard library and the core
// itself: no transport, no Redis client, no metrics library. Adapters and the
// Redis tier live in packages of their own, so a service that only limits in
// memory pulls in nothing else.
func TestCorePackagesImportOnlyTheStandardLibrary(t *testing.T) {
	core := []string{".", "./ratelimit", "./breaker", "./degrade", "./adaptive"}
	args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, core...)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"github.com/sluice-go/sluice":           true,
		"github.com/sluice-go/sluice/ratelimit": true,
		"github.com/sluice-go/sluice/breaker":   true,
		"github.com/sluice-go/sluice/degrade":   true,
		"github.com/sluice-go/sluice/adaptive":  true,
	}
	for _, dep := range strings.Fields(string(out)) {
		if allowed[dep] || strings.HasPrefix(dep, "github.com/sluice-go/sluice/internal/") {
			continue
		}
		t.Errorf("a core package depends on %s", dep)
	}
}

// Begin stays small enough to be inlined (see its comment): a Call on its
// caller's stack then takes its Guard and context without a write barrier.
func TestBeginIsInlined(t *testing.T) {
	out, err := exec.Command("go", "build", "-gcflags=-m", "-o", os.DevNull, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m): can inline \(\*Guard\)\.Begin$`).Match(out) {
		t.Errorf("Guard.Begin is no longer inlined:\n%s", regexp.MustCompile(`(?m)^.*\(\*Guard\)\.Begin\b.*$`).Find(out))
	}
}
