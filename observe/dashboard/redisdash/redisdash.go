// Package redisdash shows a Redis limiter's failure policy on a
// dashboard: the policy in force, the decisions it made instead of Redis
// and Redis's last error. The dashboard package itself does not depend on
// the Redis client.
package redisdash

import (
	"errors"
	"strings"
	"time"

	redislimit "github.com/sluice-go/sluice/ratelimit/redis"

	"github.com/sluice-go/sluice/internal/eventsource"
	"github.com/sluice-go/sluice/observe/dashboard"
	"github.com/sluice-go/sluice/observe/dashboard/internal/redisnote"
)

// Observer returns the function to give the limiter's
// redislimit.WithObserver for d to show its failure policy beside it; the
// limiter's breaker state shows already. A limiter has one observer: to
// hear its events too, call the returned function from yours.
func Observer(d *dashboard.Dashboard) (func(redislimit.Event), error) {
	if d == nil {
		return nil, errors.New("redisdash: Observer: nil dashboard")
	}
	return func(e redislimit.Event) {
		n := redisnote.Note{Limiter: eventsource.Of(e), Err: e.Err, At: time.Now()}
		switch e.Kind {
		case redislimit.EventFallback:
			// "open", "closed" or "local" after the name of the limit that
			// decided: All's member's, whose own name may hold colons.
			n.Decider = e.Decision.Policy[strings.LastIndexByte(e.Decision.Policy, ':')+1:]
		case redislimit.EventRedisError:
		default:
			return
		}
		redisnote.Record(d, n)
	}, nil
}
