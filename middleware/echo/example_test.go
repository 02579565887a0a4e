package sluiceecho_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/breaker"
	"github.com/sluice-go/sluice/degrade"
	"github.com/sluice-go/sluice/middleware"
	sluiceecho "github.com/sluice-go/sluice/middleware/echo"
)

func ExampleMiddleware() {
	clock := sluice.NewManualClock(0)
	b, err := breaker.New("orders", breaker.WithConsecutiveFailures(2), breaker.WithOpenDuration(30*time.Second))
	if err != nil {
		panic(err)
	}
	g, err := sluice.New(sluice.With(b), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}

	e := echo.New()
	guard, err := sluiceecho.Middleware(sluiceecho.WithGuard(g))
	if err != nil {
		panic(err)
	}
	e.Use(guard)
	e.GET("/orders/:id", func(c echo.Context) error {
		if c.Param("id") == "0" {
			return echo.ErrNotFound // a client error: the breaker does not count it
		}
		return echo.NewHTTPError(http.StatusBadGateway) // a failure
	})
	get := func(path string) {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, rec.Code, "Retry-After:", rec.Header().Get("Retry-After") != "")
	}
	get("/orders/0")
	get("/orders/0")
	get("/orders/1")
	get("/orders/1")
	get("/orders/1")
	// Output:
	// /orders/0 404 Retry-After: false
	// /orders/0 404 Retry-After: false
	// /orders/1 502 Retry-After: false
	// /orders/1 502 Retry-After: false
	// /orders/1 503 Retry-After: true
}

// A route's Guard answers its rejections with its fallbacks, declared once
// by cause: the catalogue's last known prices when the pricing
// dependency's breaker is open. Echo serves the handler the fallback
// answers with.
func ExampleMiddleware_fallbacks() {
	b, err := breaker.New("pricing")
	if err != nil {
		panic(err)
	}
	b.ForceOpen()
	lastKnown, err := degrade.New(degrade.OnCircuitOpen(degrade.Value[http.Handler](
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Warning", `110 - "stale prices"`)
			io.WriteString(w, `{"apple":3}`)
		}))))
	if err != nil {
		panic(err)
	}
	prices, err := sluice.New(sluice.With(b), sluice.WithFallback(lastKnown))
	if err != nil {
		panic(err)
	}
	cart, err := sluice.New(sluice.With(b))
	if err != nil {
		panic(err)
	}
	routes, err := middleware.NewRoutes(middleware.RouteTo("/prices", prices), middleware.RouteTo("/cart", cart))
	if err != nil {
		panic(err)
	}
	guard, err := sluiceecho.Middleware(sluiceecho.WithRoutes(routes))
	if err != nil {
		panic(err)
	}

	e := echo.New()
	e.Use(guard)
	e.GET("/prices", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]int{"apple": 4}) })
	e.GET("/cart", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	for _, path := range []string{"/prices", "/cart"} {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code == http.StatusOK {
			fmt.Println(path, rec.Code, strings.TrimSpace(rec.Body.String()))
		} else {
			fmt.Println(path, rec.Code, "Retry-After:", rec.Header().Get("Retry-After"))
		}
	}
	// Output:
	// /prices 200 {"apple":3}
	// /cart 503 Retry-After: 60
}
