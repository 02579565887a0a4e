package sluiceecho

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// onlyReader hides strings.Reader's WriteTo, as an upstream response body
// does: io.Copy then calls the writer's ReadFrom.
type onlyReader struct{ io.Reader }

// A handler that copies an empty upstream body to c.Response().Writer
// (io.Copy: the writer's ReadFrom) and then answers 404 sent the client a
// 404: an empty copy records no 200, so Echo's status stays the 404 and
// its body is no stale copy a fallback would later serve as a 200.
func TestEchoEmptyReadFromRecordsNoStatus(t *testing.T) {
	sw, cache, g := staleGuard(t)
	e := echo.New()
	e.Use(mw(t, WithGuard(g)))
	e.GET("/item", func(c echo.Context) error {
		if _, err := io.Copy(c.Response().Writer, onlyReader{strings.NewReader("")}); err != nil {
			return err
		}
		return c.String(http.StatusNotFound, "no such item")
	})
	rec := do(e, http.MethodGet, "/item")
	require.Equal(t, http.StatusNotFound, rec.Code)
	assert.Zero(t, cache.Len(), "a 404 was kept as a stale 200 copy")

	sw.on = true
	rec = do(e, http.MethodGet, "/item")
	assert.NotEqual(t, http.StatusOK, rec.Code, "the stale fallback served the 404's body as a 200: %q", rec.Body.String())
}
