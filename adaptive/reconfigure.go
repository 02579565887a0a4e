package adaptive

import (
	"errors"
	"fmt"
)

// Reconfigure changes the Shedder's numbers while it runs. n is a
// bulkhead's limit, as NewBulkhead takes it; it must be 0 for a Shedder
// from NewShedder, whose limit is learned. opts are the constructor's
// options, validated as it validates them; of them only WithQueue may be
// given, and without it the queue stays as it is. A Shedder with a queue
// keeps one and one without cannot be given one, since a Guard asks once
// whether Admit may wait. On an error nothing changes.
//
// Requests in flight and in the queue keep their places: a lower limit
// admits nothing more until enough of them have ended; a higher one hands
// free slots to the queue at once. A shorter wait holds for the requests
// queued too, each counted from when it came.
func (s *Shedder) Reconfigure(n int, opts ...Option) error {
	o, err := buildOptions(s.name, opts)
	if err != nil {
		return err
	}
	switch {
	case o.nameSet:
		return errors.New("adaptive: Reconfigure: WithName cannot be given: a name cannot change at run time")
	case s.est != nil && n != 0:
		return fmt.Errorf("adaptive: Reconfigure: limit %d for a Shedder whose limit is learned: want 0", n)
	case s.est == nil && n < 1:
		return fmt.Errorf("adaptive: Reconfigure: limit %d: a bulkhead's must be at least 1", n)
	case o.queueSet && (s.q == nil) != (o.queue == 0):
		return errors.New("adaptive: Reconfigure: a Shedder cannot gain or lose its queue at run time: build a new one")
	}
	if o.queueSet && s.q != nil { // WithQueue(0, 0) on one without: nothing to change
		s.q.reconfigure(o.queue, o.maxWait)
	}
	if s.est == nil {
		s.limit.Store(int64(n))
		// Slots freed for its queue, and for those of the Shedders it
		// took the place of, which admit within its limit (see ahead).
		s.woken(unknownInstant) // no instant known here
	}
	return nil
}
