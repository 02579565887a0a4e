package sluicehttp

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sluice-go/sluice"
)

// The Transport has the request's body again (GetBody: a file opened, a
// large buffer copied) only when a retry can follow: not for a Guard that
// declares no retries, nor after the last of its attempts.
func TestNoReplayWithoutARetry(t *testing.T) {
	cases := []struct {
		name    string
		opts    []sluice.Option
		answer  func(int, *http.Request) (*http.Response, error)
		maxGets int // GetBody calls a retry could need
	}{
		{"no WithRetry, 503", nil, failing, 0},
		{"no WithRetry, transport error", nil, func(int, *http.Request) (*http.Response, error) {
			return nil, errors.New("connection refused")
		}, 0},
		{"last attempt of 2", []sluice.Option{sluice.WithRetry(sluice.Retry{Attempts: 2, Budget: 1, MinPerSecond: 100})}, failing, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rt, err := Transport(&recorder{answer: tc.answer}, func(string) (*sluice.Guard, error) {
					return sluice.New(tc.opts...)
				})
				if err != nil {
					t.Fatal(err)
				}
				defer rt.Close()
				req, err := http.NewRequest(http.MethodPut, "http://dep.test/x", strings.NewReader("v"))
				if err != nil {
					t.Fatal(err)
				}
				gets := 0
				req.GetBody = func() (io.ReadCloser, error) {
					gets++
					return io.NopCloser(strings.NewReader("v")), nil
				}
				resp, _ := rt.RoundTrip(req)
				if resp != nil {
					_ = resp.Body.Close()
				}
				if gets > tc.maxGets {
					t.Errorf("GetBody called %d times, want at most %d: the body was had again for a retry that could not be sent", gets, tc.maxGets)
				}
			})
		})
	}
}
