package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/observe/dashboard"
)

func ExampleNew() {
	dash, err := dashboard.New()
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/debug/sluice/", dash)
	g, err := sluice.New(sluice.WithName("payments"), sluice.WithObserver(dash))
	if err != nil {
		panic(err)
	}
	defer g.Close()

	_ = g.Do(context.Background(), func(context.Context) error { return nil })
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/sluice/api/state", nil))
	var state struct {
		Guards []struct {
			Name     string
			Admitted int
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &state); err != nil {
		panic(err)
	}
	fmt.Println(state.Guards[0].Name, "admitted", state.Guards[0].Admitted)
	// Output:
	// payments admitted 1
}

// Admin actions for the clients on this machine only: a request from
// elsewhere is refused, as is any without a page's token.
func ExampleWithAuthorizer() {
	dash, err := dashboard.New(dashboard.WithAuthorizer(func(r *http.Request) bool {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		return err == nil && net.ParseIP(host).IsLoopback()
	}))
	if err != nil {
		panic(err)
	}
	form := url.Values{"guard": {"payments"}, "policy": {"0"}, "name": {"breaker/payments"}, "action": {"open"}}
	req := httptest.NewRequest(http.MethodPost, "http://localhost/debug/sluice/api/action", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	dash.ServeHTTP(rec, req)
	fmt.Println(rec.Code, strings.TrimSpace(rec.Body.String()))
	// Output:
	// 403 {"ok":false,"text":"refused: no valid page token"}
}
