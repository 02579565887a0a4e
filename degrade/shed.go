package degrade

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
)

// Shed is a policy that turns every request away while its Switch is on:
// put it in the chain of a non-core route to shed the whole route on
// purpose under pressure, the way handlers check Switch.On to skip work.
// Its rejections carry sluice.ErrOverloaded (HTTP 503, gRPC Unavailable)
// and the RetryAfter it was made with. While the switch is off it admits
// every request, with Limit -1.
//
// Shed is a sluice.StateSource: its Subscribe reports the switch's flips.
type Shed struct {
	sw         *Switch
	name       string
	retryAfter time.Duration
}

// NewShed returns a Shed on sw whose rejections tell the caller to retry
// after retryAfter, which must be positive. Its Name is "degrade/" followed
// by the switch's name.
func NewShed(sw *Switch, retryAfter time.Duration) (*Shed, error) {
	if sw == nil || sw.clock == nil {
		return nil, errors.New("degrade: NewShed: nil switch, or one not made by NewSwitch")
	}
	if retryAfter <= 0 {
		return nil, fmt.Errorf("degrade: NewShed: retry after %v is not positive", retryAfter)
	}
	return &Shed{sw: sw, name: "degrade/" + sw.name, retryAfter: retryAfter}, nil
}

// Name returns "degrade/" followed by the switch's name.
func (p *Shed) Name() string { return p.name }

// Admit admits the request while the switch is off and rejects it with
// sluice.ErrOverloaded while it is on.
func (p *Shed) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	if p.sw.On() {
		return 0, sluice.Quota{Limit: -1, RetryAfter: p.retryAfter}, sluice.ErrOverloaded
	}
	return 0, sluice.Quota{Limit: -1}, nil
}

// Done does nothing: a Shed keeps no state per request.
func (p *Shed) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}

// Needs returns 0: a Shed neither waits nor keeps state per request.
func (p *Shed) Needs() sluice.Needs { return 0 }

// Subscribe registers fn for the switch's flips, as Switch.Subscribe does,
// with the StateChange naming the Shed policy, as a StateChange names the
// policy whose state changed.
func (p *Shed) Subscribe(fn func(sluice.StateChange)) (unsubscribe func()) {
	if fn == nil {
		return func() {}
	}
	return p.sw.Subscribe(func(c sluice.StateChange) {
		c.Policy = p.name
		fn(c)
	})
}

var (
	_ sluice.Policy      = (*Shed)(nil)
	_ sluice.StateSource = (*Shed)(nil)
)
