package routing

import "github.com/sluice-go/sluice"

// FallbackKey names the rejections a gRPC fallback answers; the HTTP and
// Echo adapters serve the Guard's fallbacks instead, and so will the gRPC
// adapter, which is the last user of FallbackKey and LookupFallback. It
// names those: those of
// Route (an HTTP pattern, an Echo route path, a gRPC full method; "" for
// every route) for Cause (sluice.CauseNone for every cause).
type FallbackKey struct {
	Route string
	Cause sluice.Cause
}

// LookupFallback returns the fallback of m that answers a rejection of route
// for cause, the most specific first: route and cause, route, cause, then
// neither. The adapters declare their fallbacks by FallbackKey and find
// them here, so that the same table picks the same fallback in each.
func LookupFallback[F any](m map[FallbackKey]F, route string, cause sluice.Cause) (F, bool) {
	for _, k := range [...]FallbackKey{{route, cause}, {route, sluice.CauseNone}, {"", cause}, {"", sluice.CauseNone}} {
		if fb, ok := m[k]; ok {
			return fb, true
		}
	}
	var none F
	return none, false
}
