package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockedBuffer is a bytes.Buffer that the server's goroutines and the
// test may use at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The frontend answers GET /stock with the status of what its client saw:
// the dependency's 200 or 500, then, once the breaker opens, 503 for a call
// the Guard did not send.
func TestTheFrontendAnswersWithTheCallsStatus(t *testing.T) {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	ctx, cancel := context.WithCancel(context.Background())
	out := &lockedBuffer{}
	done := make(chan error, 1)
	go func() { done <- serveUntil(ctx, "127.0.0.1:0", out) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	addrRe := regexp.MustCompile(`frontend on (http://127\.0\.0\.1:\d+)`)
	var base string
	for range 200 {
		if m := addrRe.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.NotEmpty(t, base, "the frontend never said where it listens")
	get := func() (int, string) {
		resp, err := c.Get(base + "/stock")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	status, body := get()
	assert.Equal(t, http.StatusOK, status, body)
	resp, err := c.Post(base+"/dependency/failing", "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	seen := map[int]bool{}
	for range 20 {
		status, body = get()
		seen[status] = true
		if strings.HasPrefix(body, "not sent") {
			break
		}
	}
	assert.True(t, seen[http.StatusInternalServerError], "the dependency's failures: %v", seen)
	assert.Equal(t, http.StatusServiceUnavailable, status, body)
}
