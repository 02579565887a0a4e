package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A HEAD of api/events answers its headers and returns: its body would go
// nowhere, the writes would never fail, and a client that reuses the
// connection for its next request would never let the request's context
// end (the handler's goroutine would leak, the next request hang).
func TestHeadOfTheEventStreamEnds(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodHead, "/debug/sluice/api/events", nil)
	rec := httptest.NewRecorder()
	start := time.Now()
	f.d.ServeHTTP(rec, req)
	took := time.Since(start)
	assert.Less(t, took, 500*time.Millisecond, "a HEAD of api/events ran as a stream until its context ended")
}
