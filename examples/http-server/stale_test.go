package main

import (
	"net/http/httptest"
	"testing"
)

func serveAs(t *testing.T, a *app, method, path, client string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = "127.0.0.1:40000"
	if client != "" {
		r.Header.Set("X-Forwarded-For", client)
	}
	w := httptest.NewRecorder()
	a.handler.ServeHTTP(w, r)
	return w
}

// "When a breaker is open, /prices answers with the last good response it
// served (stale, with an Age field)": to a client that did not itself fetch
// /prices before the outage too, since prices do not depend on who asks.
func TestStalePricesServeEveryClient(t *testing.T) {
	a, err := newApp(func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	if w := serveAs(t, a, "GET", "/prices", "192.0.2.10"); w.Code != 200 {
		t.Fatalf("first /prices: %d", w.Code)
	}
	serveAs(t, a, "POST", "/upstream/down", "")
	serveAs(t, a, "GET", "/prices", "192.0.2.20")
	serveAs(t, a, "GET", "/prices", "192.0.2.21") // two 502s: the breaker opens
	w := serveAs(t, a, "GET", "/prices", "192.0.2.30")
	if w.Code != 200 || w.Header().Get("Age") == "" {
		t.Fatalf("a new client during the outage: %d %q (Age %q); want the last good /prices response, stale, with Age", w.Code, w.Body.String(), w.Header().Get("Age"))
	}
}
