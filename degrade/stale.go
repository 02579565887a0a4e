package degrade

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/guardhook"
)

// Stale remembers the last good answer of type T per key and serves it when
// a call for that key is rejected or fails: a stale answer instead of an
// error. It keeps at most a fixed number of keys, dropping the one written
// longest ago to make room, and never serves an answer older than its
// maximum age.
//
// Most callers want [Stale.Execute], which runs a call under a Guard,
// remembers its good answers and serves the stale one, saying so and how old
// it is in the [Result]. Placed in the Guard's fallbacks
// (sluice.WithFallback), a Stale answers before the fallbacks listed after
// it, so a declared default serves only when there is nothing stale to
// serve, and the Guard's OnFallback observers see it, named "stale";
// otherwise it answers when the Guard's fallbacks have not, unseen by them.
//
// An answer is kept and served as it is, not copied: when T is or holds a
// slice, a map or a pointer, every stale answer shares it with the call that
// produced it, so neither may modify it afterwards.
//
// A Stale is safe for concurrent use.
type Stale[T any] struct {
	clock      sluice.Clock
	maxAge     time.Duration
	maxEntries int
	name       string

	mu      sync.Mutex
	entries map[string]*staleEntry[T]
	// newest and oldest end the list of entries in the order they were
	// written, newest first.
	newest, oldest *staleEntry[T]
}

type staleEntry[T any] struct {
	key        string
	v          T
	at         time.Duration
	prev, next *staleEntry[T] // prev is newer, next older
}

// NewStale returns a Stale that serves answers up to maxAge old and remembers
// them for at most maxEntries keys. Both must be positive.
func NewStale[T any](maxAge time.Duration, maxEntries int, opts ...Option) (*Stale[T], error) {
	if maxAge <= 0 {
		return nil, fmt.Errorf("degrade: NewStale: max age %v is not positive", maxAge)
	}
	if maxEntries <= 0 {
		return nil, fmt.Errorf("degrade: NewStale: max entries %d is not positive", maxEntries)
	}
	cfg := options{clock: sluice.SystemClock}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("degrade: NewStale: option %d is nil", i)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.name == "" {
		cfg.name = "stale"
	}
	return &Stale[T]{
		clock:      cfg.clock,
		maxAge:     maxAge,
		maxEntries: maxEntries,
		name:       cfg.name,
		entries:    make(map[string]*staleEntry[T]),
	}, nil
}

// Result is an answer given by [Stale.Execute].
type Result[T any] struct {
	// Value is the answer.
	Value T
	// Stale reports whether Value is a remembered answer served in place of
	// a rejected or failed call; false when it is the call's own.
	Stale bool
	// Age is how long ago the stale answer was the call's own; 0 when fresh.
	Age time.Duration
}

// Put remembers v as the answer for key, now. A zero Stale (not made by
// NewStale) remembers nothing.
func (s *Stale[T]) Put(key string, v T) {
	if s.clock == nil {
		return
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[key]; ok {
		e.v, e.at = v, now
		s.unlink(e)
		s.pushNewest(e)
		return
	}
	if len(s.entries) >= s.maxEntries {
		old := s.oldest
		s.unlink(old)
		delete(s.entries, old.key)
	}
	e := &staleEntry[T]{key: key, v: v, at: now}
	s.entries[key] = e
	s.pushNewest(e)
}

// Get returns the answer remembered for key and its age, or false when there
// is none at most the maximum age old.
func (s *Stale[T]) Get(key string) (v T, age time.Duration, ok bool) {
	if s.clock == nil {
		return v, 0, false // a zero Stale
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok {
		return v, 0, false
	}
	age = max(now-e.at, 0)
	if age > s.maxAge {
		s.unlink(e)
		delete(s.entries, key)
		return v, 0, false
	}
	return e.v, age, true
}

// Delete forgets the answer remembered for key.
func (s *Stale[T]) Delete(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[key]; ok {
		s.unlink(e)
		delete(s.entries, key)
	}
}

func (s *Stale[T]) pushNewest(e *staleEntry[T]) {
	e.prev, e.next = nil, s.newest
	if s.newest != nil {
		s.newest.prev = e
	}
	s.newest = e
	if s.oldest == nil {
		s.oldest = e
	}
}

func (s *Stale[T]) unlink(e *staleEntry[T]) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.newest = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.oldest = e.prev
	}
	e.prev, e.next = nil, nil
}

// staleCall is the context of one call run by Execute: it carries the key to
// the Stale's AnswerValue when the Stale is one of the Guard's fallbacks,
// and brings back what it served.
type staleCall[T any] struct {
	context.Context
	s     *Stale[T]
	key   string
	age   time.Duration
	stale bool
	// hide is the context the first attempt of fn runs with, kept here to
	// save an allocation; attempted once it has run.
	hide      hideStaleCall[T]
	attempted bool
}

type staleCallKey[T any] struct{ s *Stale[T] }

func (c *staleCall[T]) Value(k any) any {
	if k, ok := k.(staleCallKey[T]); ok && k.s == c.s {
		return c
	}
	return c.Context.Value(k)
}

// Execute runs fn under g for key, as sluice.Execute does, and remembers its
// answer when it succeeds. When the request is rejected or fn fails, and no
// fallback of the Guard served, it serves the answer remembered for key if
// there is one at most the maximum age old, with Stale set and its Age;
// otherwise it returns the error. A Guard fallback that declares an answer
// of another type than T, where none of type T does, is a mistake it
// reports, remembered answer or not. A nil g runs fn unguarded. Put the
// Stale in the Guard's fallbacks (sluice.WithFallback) to have its answers
// told to the Guard's OnFallback observers and ordered among its other
// fallbacks: it then serves only in its turn, and a fallback before it
// that declines (answers with an error) has the last word.
func (s *Stale[T]) Execute(ctx context.Context, g *sluice.Guard, key string, fn func(context.Context) (T, error)) (Result[T], error) {
	if ctx == nil || fn == nil {
		v, err := sluice.Execute(ctx, g, fn) // which refuses them, touching no policy
		return Result[T]{Value: v}, err
	}
	if s.clock == nil {
		return Result[T]{}, errors.New("degrade: Stale.Execute on a zero Stale: make it with NewStale")
	}
	call := &staleCall[T]{Context: ctx, s: s, key: key}
	v, err := sluice.Execute(call, g, func(ctx context.Context) (T, error) {
		// Each attempt of a Guard that retries has a context of its own:
		// the first one's is kept in call, the later ones' are made.
		h := &call.hide
		if call.attempted {
			h = &hideStaleCall[T]{ctx, s}
		} else {
			call.attempted, *h = true, hideStaleCall[T]{ctx, s}
		}
		v, err := fn(h)
		if err == nil {
			s.Put(key, v)
		}
		return v, err
	})
	if err == nil {
		return Result[T]{Value: v, Stale: call.stale, Age: call.age}, nil
	}
	if guardhook.Misdeclared(err) {
		return Result[T]{Value: v}, err // a mistake in the Guard's fallbacks, not to hide
	}
	if s.inFallbacks(g) {
		return Result[T]{Value: v}, err // the Guard's layer gave it its turn
	}
	sv, age, ok := s.Get(key)
	if !ok {
		return Result[T]{Value: v}, err
	}
	return Result[T]{Value: sv, Stale: true, Age: age}, nil
}

// inFallbacks reports whether s is one of g's fallbacks.
func (s *Stale[T]) inFallbacks(g *sluice.Guard) bool {
	if g == nil {
		return false
	}
	for i := range guardhook.NumFallbacks(g) {
		if guardhook.FallbackAt(g, i) == any(s) {
			return true
		}
	}
	return false
}

// AnswerValue implements sluice.FallbackOf for a Stale placed in a Guard's
// fallbacks: for a call run by [Stale.Execute] it serves the answer
// remembered for the call's key. It passes (returns an empty name) when the
// call was not run by Execute or nothing fresh enough is remembered.
func (s *Stale[T]) AnswerValue(ctx context.Context, err error) (v T, name string, out error) {
	call, ok := ctx.Value(staleCallKey[T]{s}).(*staleCall[T])
	if !ok || err == nil {
		return v, "", err
	}
	v, age, ok := s.Get(call.key)
	if !ok {
		return v, "", err
	}
	call.stale, call.age = true, age
	return v, s.name, nil
}

// Declared implements sluice.Fallback: it reports whether AnswerValue would
// serve an answer for err in ctx, named as the Stale is, without marking the
// call as served.
func (s *Stale[T]) Declared(ctx context.Context, err error) (string, bool) {
	call, ok := ctx.Value(staleCallKey[T]{s}).(*staleCall[T])
	if !ok || err == nil {
		return "", false
	}
	if _, _, ok := s.Get(call.key); !ok {
		return "", false
	}
	return s.name, true
}

// Answer implements sluice.Fallback: it is AnswerValue without the value.
func (s *Stale[T]) Answer(ctx context.Context, err error) (name string, out error) {
	_, name, out = s.AnswerValue(ctx, err)
	return name, out
}

// hideStaleCall is the context fn runs with: its sub-calls are not this
// Execute's call, so a Stale in their Guards must not see its key.
type hideStaleCall[T any] struct {
	context.Context
	s *Stale[T]
}

func (c *hideStaleCall[T]) Value(k any) any {
	if k, ok := k.(staleCallKey[T]); ok && k.s == c.s {
		return nil
	}
	return c.Context.Value(k)
}
