package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The quick start answers its first 10 calls and then 429 with Retry-After,
// per client, and stops when its context ends.
func TestQuickstart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln) }()

	client := &http.Client{Timeout: 5 * time.Second}
	var codes []int
	var last *http.Response
	for range 12 {
		resp, err := client.Get("http://" + addr + "/hello")
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		last = resp
	}
	require.Len(t, codes, 12)
	assert.Equal(t, []int{200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429, 429}, codes)
	assert.Equal(t, "1", last.Header.Get("Retry-After"))
	assert.True(t, strings.HasPrefix(last.Header.Get("RateLimit"), `"per-client";r=0`), last.Header.Get("RateLimit"))

	cancel()
	require.NoError(t, <-done)
}
