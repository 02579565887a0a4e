package middleware

// Renderer says how the adapters render rate-limit header fields and
// rejection bodies; they take one with their WithRenderer option. Its zero
// value sends the IETF draft RateLimit and RateLimit-Policy fields on
// admitted and rejected responses, no older X-RateLimit fields, and RFC 9457
// problem bodies (application/problem+json) whose type is
// "urn:sluice:problem:" followed by the cause ("rate-limited").
type Renderer struct {
	// Legacy adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset next to the draft fields.
	Legacy bool
	// QuietAdmitted leaves the rate-limit fields off admitted responses; only
	// rejections carry them.
	QuietAdmitted bool
	// ProblemTypeBase prefixes the cause ("rate-limited") to form the type
	// of problem bodies; "" means "urn:sluice:problem:".
	ProblemTypeBase string
}
