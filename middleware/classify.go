package middleware

import "github.com/sluice-go/sluice"

// ClassifyHTTPStatus is the default of the adapters' WithClassifier, which
// decides what an HTTP response status says about the health of the handler
// or dependency that produced it: 5xx is a Failure; 1xx,
// 2xx and 3xx are a Success; 4xx and anything else is Ignored (the client's
// fault says nothing about the server's health). 0, a handler that wrote
// nothing, is taken as 200.
func ClassifyHTTPStatus(status int) sluice.Outcome {
	switch {
	case status == 0:
		return sluice.Success
	case status >= 500 && status <= 599:
		return sluice.Failure
	case status >= 100 && status < 400:
		return sluice.Success
	}
	return sluice.Ignored
}
