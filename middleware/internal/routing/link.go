package routing

import "context"

// What package middleware keeps to itself and shows the adapters only
// through these, set by its init: the table behind a *middleware.Routes,
// and a *middleware.Keyer's keying of a request.
var (
	// TableOf returns the table of rs, a *middleware.Routes; nil for nil.
	TableOf func(rs any) *Routes
	// KeyContext keys r, a middleware.Request, with k, a *middleware.Keyer:
	// it returns ctx carrying r's key for keyed policies, or an error
	// matching middleware.ErrMissingKey when r has none and k rejects such
	// requests.
	KeyContext func(k any, ctx context.Context, r any) (context.Context, error)
	// MissingKey returns the key k, a *middleware.Keyer, gives every
	// request without one ("unknown" by default): no client's; when it
	// rejects them, the key its functions give some all the same
	// (keyhook.NoClient), else "".
	MissingKey func(k any) string
)
