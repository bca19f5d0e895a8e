package admission

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// Defaults for Options.Evaluations.
const (
	// DefaultQueueFactor: requests allowed to wait per evaluation slot. The
	// wait bound, not this count, keeps latency in check; the count only
	// caps what a flood can park in memory.
	DefaultQueueFactor = 64
	// DefaultQueueWait bounds how long a request waits for a slot.
	DefaultQueueWait = time.Second
)

// Evaluations bounds concurrent policy evaluations. Evaluation is CPU-bound
// (milliseconds and ~1 MB of short-lived allocations each): running more of
// them at once than there are cores only stretches every one of them past
// its deadline and multiplies the heap. Slots hand the cores to a few
// evaluations at a time; a bounded FIFO queue absorbs bursts; past it, the
// request is shed at once with api.CodeOverloaded (cheap, retryable) instead of
// queueing without bound.
type Evaluations struct {
	// Slots is the number of evaluations that run at once; 0 or less
	// disables the limit (every evaluation starts at once).
	Slots int
	// Queue is the number of requests that may wait for a slot (default
	// DefaultQueueFactor × Slots); beyond it a request is shed at once.
	Queue int
	// Wait bounds the time a request waits for a slot (default
	// DefaultQueueWait); the request's own deadline bounds it too.
	Wait time.Duration
}

// limiter is a counting semaphore with a bounded wait queue. Waiters on a
// channel send are served in arrival order, so the queue is FIFO.
type limiter struct {
	slots   chan struct{}
	waiting atomic.Int64
	queue   int64
	wait    time.Duration
}

// Effective is e with the defaults filled in: what the Service enforces.
// Without slots there is no bound, and Queue and Wait are zero.
func (e Evaluations) Effective() Evaluations {
	if e.Slots <= 0 {
		return Evaluations{}
	}
	if e.Queue <= 0 {
		e.Queue = DefaultQueueFactor * e.Slots
	}
	if e.Wait <= 0 {
		e.Wait = DefaultQueueWait
	}
	return e
}

func newLimiter(e Evaluations) *limiter {
	e = e.Effective()
	if e.Slots == 0 {
		return nil
	}
	return &limiter{slots: make(chan struct{}, e.Slots), queue: int64(e.Queue), wait: e.Wait}
}

// acquire takes a slot, waiting in the queue when all are busy. It reports
// false (shed) when the queue is full, the wait ran out or ctx ended first.
// A nil limiter never waits.
func (l *limiter) acquire(ctx context.Context) bool {
	if l == nil {
		return true
	}
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	if l.waiting.Add(1) > l.queue {
		l.waiting.Add(-1)
		return false
	}
	defer l.waiting.Add(-1)
	t := time.NewTimer(l.wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// saturated reports whether acquire would shed at once: every slot busy and
// the queue full. Admit checks it before verifying anything.
func (l *limiter) saturated() bool {
	return l != nil && len(l.slots) == cap(l.slots) && l.waiting.Load() >= l.queue
}

// overloaded is the answer to a shed admission; early is true when it was
// shed before any verification (the queue was full), false when it waited
// for a slot in vain.
func overloaded(early bool) Outcome {
	msg := "no policy evaluation slot became free in time; nothing was evaluated or consumed: retry with the same idempotency key"
	if early {
		msg = "every policy evaluation slot is busy and the queue is full; nothing was verified, evaluated or consumed: retry with the same idempotency key"
	}
	o := fail(api.CodeOverloaded, msg)
	o.RetryAfter = time.Second
	return o
}

// release frees a slot taken by acquire.
func (l *limiter) release() {
	if l != nil {
		<-l.slots
	}
}

// InFlight reports the evaluations running and the requests waiting for a
// slot (for metrics); both are 0 without a limit.
func (s *Service) InFlight() (running, waiting int) {
	if s.limit == nil {
		return 0, 0
	}
	return len(s.limit.slots), int(s.limit.waiting.Load())
}
