package sluice_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-go/sluice"
)

var errNotFoundLate = errors.New("not found")

// Report's contract: past the Guard's deadline the error is the timeout
// only when o is a Failure or err a rejection or a context's end. An end its
// caller reported Ignored (a not-found, answered as the deadline came) goes
// back as itself, as the adapters answer a 4xx or a NotFound past it,
// whatever the Guard's Classifier would count it.
func TestReportIgnoredPastTheDeadlineStandsAsItIs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := sluice.New(sluice.WithTimeout(100 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		var c sluice.Call
		if err := g.Begin(context.Background(), &c); err != nil {
			t.Fatal(err)
		}
		<-c.Context().Done()
		got := c.Report(sluice.Ignored, errNotFoundLate)
		if got != errNotFoundLate {
			t.Fatalf("Report(Ignored, notFound) past the deadline returned %v (timeout=%v), want the error as it is", got, errors.Is(got, sluice.ErrTimeout))
		}
	})
}
