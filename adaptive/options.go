package adaptive

import (
	"errors"
	"fmt"
	"time"
)

// Option configures a Shedder; each may be given once.
type Option func(*options) error

type options struct {
	name     string
	queue    int
	maxWait  time.Duration
	queueSet bool
	nameSet  bool
}

// WithName sets the name the Shedder reports in its decisions, errors and
// state changes; the default is "adaptive/shedder" for NewShedder and
// "adaptive/bulkhead" for NewBulkhead.
func WithName(name string) Option {
	return func(o *options) error {
		if name == "" {
			return errors.New("adaptive: WithName: empty name")
		}
		if o.nameSet {
			return errors.New("adaptive: WithName given twice")
		}
		o.name, o.nameSet = name, true
		return nil
	}
}

// WithQueue lets up to size requests over the limit wait for a slot, each
// for at most maxWait, and less once the queue stands (see the package doc);
// a maxWait of 0 lets them wait, in arrival order, until their context is
// done. A request whose context is canceled (its caller went away) while
// it waits, or before it can, is rejected with an error that wraps both
// the Shedder's and context.Canceled, without a RetryAfter, and counts for
// no shed; one whose deadline runs out in the queue is shed. WithQueue(0, 0) rejects them at once. The
// default is
// WithQueue(1000, 200*time.Millisecond) for NewShedder and no queue for
// NewBulkhead.
func WithQueue(size int, maxWait time.Duration) Option {
	return func(o *options) error {
		if size < 0 || maxWait < 0 || (size == 0 && maxWait != 0) {
			return fmt.Errorf("adaptive: WithQueue: size %d and wait %v: want a size of at least 1 and a wait of at least 0, or both 0 for no queue", size, maxWait)
		}
		if o.queueSet {
			return errors.New("adaptive: WithQueue given twice")
		}
		o.queue, o.maxWait, o.queueSet = size, maxWait, true
		return nil
	}
}

func buildOptions(name string, opts []Option) (options, error) {
	o := options{name: name}
	for i, opt := range opts {
		if opt == nil {
			return o, fmt.Errorf("adaptive: option %d is nil", i)
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}
