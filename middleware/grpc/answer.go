package sluicegrpc

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/policywindow"
	"github.com/sluice-go/sluice/middleware/internal/routing"
	"google.golang.org/grpc/metadata"
)

// answer is what the interceptors answer a rejection with: the error they
// return, whose status gRPC sends, and, on a server, the trailer metadata
// set before it. Both are immutable and shared by every rejection that
// agrees with the one they were made for.
type answer struct {
	rej   error          // the Guard's rejection answered; its identity is the key
	rt    *routing.Route // the route whose windows the quota fields name
	ms    int64          // the announced delay, in whole milliseconds
	epoch uint64         // the policywindow epoch of the windows md names
	err   *rejection
	md    metadata.MD  // nil on a client and in the tap
	pol   string       // rej's policy and cause: an answer to replace
	cause sluice.Cause // as a kind: a cause's own value may not compare
}

// answerSlots is the number of answers a config keeps: one for each policy
// that rejects at the same time, as a flood of rejections meets few of them.
const answerSlots = 8

// answers keeps the last answer of each rejecting policy. A Guard shares one
// rejection error among a policy's rejections whose answers agree to the
// millisecond (an open breaker's for its whole open spell); the answer
// differs only by the delay it announces, counted down to the millisecond,
// so a flood of rejections makes one answer each millisecond and shares it.
type answers struct {
	slots [answerSlots]atomic.Pointer[answer]
	next  atomic.Uint32 // the slot a new policy's answer takes
}

// answer returns the answer to rej, a Guard's rejection with Decision d,
// on route rt (nil on a client); trailers asks for its trailer metadata.
// It is made when no kept answer agrees, and kept unless rej is not one of
// a Guard's shared rejections.
func (c *config) answer(rt *routing.Route, d sluice.Decision, rej error) *answer {
	d.RetryAfter = ceilMilli(retryDelay(d))
	ms := int64(d.RetryAfter / time.Millisecond)
	shared := isGuardRejection(rej)
	epoch := policywindow.Epoch() // a SetLimit since changes the window told
	if shared {
		for i := range c.answers.slots {
			if a := c.answers.slots[i].Load(); a != nil && a.rej == rej && a.ms == ms && a.rt == rt && a.epoch == epoch {
				return a
			}
		}
	}
	a := &answer{rej: rej, rt: rt, ms: ms, epoch: epoch, err: newRejection(rej, d), pol: d.Policy, cause: sluice.CauseOf(d.Cause)}
	a.err.client = !c.trailers // set no server's trailers
	if c.trailers {
		a.md = c.rejectionMetadata(rt, d, ms)
	}
	if !shared {
		return a
	}
	slot := -1
	for i := range c.answers.slots {
		if o := c.answers.slots[i].Load(); o == nil || (o.rt == rt && o.pol == a.pol && o.cause == a.cause) {
			slot = i
			break
		}
	}
	if slot < 0 {
		slot = int(c.answers.next.Add(1) % answerSlots)
	}
	c.answers.slots[slot].Store(a)
	return a
}

// rejectionMetadata is the trailer metadata of a rejection on route rt with
// Decision d, which announces a delay of ms milliseconds: the RateLimit
// fields when the rejecting policy has a quota, and gRPC's retry pushback
// unless WithoutRetryPushback turned it off; nil when it has neither.
func (c *config) rejectionMetadata(rt *routing.Route, d sluice.Decision, ms int64) metadata.MD {
	var md metadata.MD
	if hasQuota(d) {
		md = quotaMetadata(rt, d, d.RetryAfter)
	}
	if c.pushback {
		if md == nil {
			md = make(metadata.MD, 1)
		}
		md[MetadataRetryPushback] = []string{strconv.FormatInt(ms, 10)}
	}
	return md
}
