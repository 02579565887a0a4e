package prommetrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/observe/prommetrics"
)

func ExampleNew() {
	metrics, handler, err := prommetrics.New()
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", handler)
	g, err := sluice.New(sluice.WithName("payments"), sluice.WithObserver(metrics))
	if err != nil {
		panic(err)
	}
	defer g.Close()

	_ = g.Do(context.Background(), func(context.Context) error { return nil })
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "sluice_call_duration_seconds_count") {
			fmt.Println(line)
		}
	}
	// Output:
	// sluice_call_duration_seconds_count{sluice_guard="payments",sluice_outcome="success"} 1
}
