package admission

import (
	"context"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	if got := (Evaluations{Slots: 3, Wait: time.Minute}).Effective(); got != (Evaluations{Slots: 3, Queue: 3 * DefaultQueueFactor, Wait: time.Minute}) {
		t.Fatalf("Effective = %+v", got)
	}
	if got := (Evaluations{Slots: -1, Queue: 9}).Effective(); got != (Evaluations{}) {
		t.Fatalf("Effective without slots = %+v, want no bound", got)
	}
	if newLimiter(Evaluations{}) != nil || newLimiter(Evaluations{Slots: -1}) != nil {
		t.Fatal("no slots must mean no limiter")
	}
	var none *limiter
	if !none.acquire(context.Background()) {
		t.Fatal("a nil limiter must never shed")
	}
	none.release()

	l := newLimiter(Evaluations{Slots: 2, Wait: time.Hour})
	if cap(l.slots) != 2 || l.queue != 2*DefaultQueueFactor {
		t.Fatalf("slots %d queue %d, want 2 and %d", cap(l.slots), l.queue, 2*DefaultQueueFactor)
	}
	if !l.acquire(context.Background()) || !l.acquire(context.Background()) {
		t.Fatal("free slots must be taken at once")
	}
	if l.saturated() {
		t.Fatal("slots busy but the queue empty: not saturated")
	}

	// A waiter whose request ends is shed and leaves the queue.
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan bool)
	go func() { got <- l.acquire(ctx) }()
	for l.waiting.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if <-got {
		t.Fatal("a cancelled waiter must not get a slot")
	}
	if l.waiting.Load() != 0 {
		t.Fatalf("waiting = %d after the waiter left", l.waiting.Load())
	}

	// A waiter gets the slot a release frees.
	go func() { got <- l.acquire(context.Background()) }()
	for l.waiting.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	l.release()
	if !<-got {
		t.Fatal("the waiter did not get the freed slot")
	}

	// A full queue sheds at once, without waiting.
	full := newLimiter(Evaluations{Slots: 1, Queue: 1, Wait: time.Hour})
	full.acquire(context.Background())
	go func() { got <- full.acquire(context.Background()) }()
	for full.waiting.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	if !full.saturated() {
		t.Fatal("slot busy and queue full: saturated must be true")
	}
	if full.acquire(context.Background()) {
		t.Fatal("a request beyond the queue must be shed")
	}
	if full.waiting.Load() != 1 {
		t.Fatalf("waiting = %d: a shed request must not count as waiting", full.waiting.Load())
	}
	full.release()
	if !<-got {
		t.Fatal("the queued waiter did not get the slot")
	}
}
