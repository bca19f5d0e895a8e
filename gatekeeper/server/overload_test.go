package server_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/internal/patience"
)

// heldDecider holds every evaluation until release is closed, then decides
// with the embedded bundle.
type heldDecider struct {
	inner   admission.Decider
	entered chan struct{}
	release chan struct{}
}

func (d *heldDecider) Decide(ctx context.Context, in map[string]any) (policy.Decision, error) {
	d.entered <- struct{}{}
	<-d.release
	return d.inner.Decide(ctx, in)
}

func (d *heldDecider) Revision() string { return d.inner.Revision() }

// Facts is the inner bundle's training-facts model: the admission builds
// the input with it.
func (d *heldDecider) Facts() *trainfacts.Model { return admission.FactsOf(d.inner) }

// waitForMetric polls /metrics until it holds line.
func (h *hostile) waitForMetric(t *testing.T, line string) {
	t.Helper()
	deadline := time.Now().Add(patience.Wait)
	for !strings.Contains(h.metricsText(t), line) {
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never showed %q", line)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOverloadShedsBeforeAnything: with every evaluation slot busy and the
// wait queue full, an admission is answered 503 ADMISSION_OVERLOADED with
// Retry-After at once, nothing consumed or written; the queued admission
// and the running one complete normally once the slot frees.
func TestOverloadShedsBeforeAnything(t *testing.T) {
	held := &heldDecider{entered: make(chan struct{}, 4), release: make(chan struct{})}
	h := newHostile(t, hostileOptions{
		policy:      func() admission.Decider { return held },
		evaluations: admission.Evaluations{Slots: 1, Queue: 1, Wait: time.Minute},
	})
	held.inner = h.engine
	running, queued, shed := h.fixture(t), h.fixture(t), h.fixture(t)

	var wg sync.WaitGroup
	replies := make([]reply, 2)
	for i, f := range []fixture{running, queued} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = h.admit(t, h.body(t, f, nil))
		}()
		if i == 0 {
			<-held.entered // the first admission holds the only slot
		}
	}
	h.waitForMetric(t, `itogate_policy_evaluations_in_flight{state="waiting"} 1`)
	h.waitForMetric(t, `itogate_policy_evaluations_in_flight{state="running"} 1`)

	r := h.admit(t, h.body(t, shed, nil))
	if r.status != http.StatusServiceUnavailable || r.code() != api.CodeOverloaded {
		t.Fatalf("with the slot and the queue full: %d %s, want 503 %s", r.status, r.raw, api.CodeOverloaded)
	}
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Fatalf("Retry-After %q, want 1", got)
	}
	h.untouched(t, shed.ref, shed.key)
	// Shed before any verification: only the two admitted requests' distinct
	// entitlement tokens were ever verified.
	h.waitForMetric(t, `itogate_verification_cache_lookups_total{purpose="entitlement",result="miss"} 2`)

	close(held.release)
	wg.Wait()
	for i, r := range replies {
		if r.status != http.StatusOK || r.data()["decision"] != "allow" {
			t.Fatalf("admission %d after the slot freed: %d %s", i, r.status, r.raw)
		}
	}
	// The shed request was untouched: the same request now succeeds.
	h.allowed(t, shed)
	h.waitForMetric(t, `itogate_admission_decisions_total{code="ADMISSION_OVERLOADED",decision="deny"} 1`)
	h.finish(t)
}

// TestOverloadWaitIsBounded: a queued admission gives up after the queue
// wait, answered like a full queue, and nothing is consumed.
func TestOverloadWaitIsBounded(t *testing.T) {
	held := &heldDecider{entered: make(chan struct{}, 4), release: make(chan struct{})}
	h := newHostile(t, hostileOptions{
		policy:      func() admission.Decider { return held },
		evaluations: admission.Evaluations{Slots: 1, Queue: 8, Wait: 50 * time.Millisecond},
	})
	held.inner = h.engine
	running, waiting := h.fixture(t), h.fixture(t)
	done := make(chan reply, 1)
	go func() { done <- h.admit(t, h.body(t, running, nil)) }()
	<-held.entered

	r := h.admit(t, h.body(t, waiting, nil))
	if r.status != http.StatusServiceUnavailable || r.code() != api.CodeOverloaded {
		t.Fatalf("after the queue wait: %d %s, want 503 %s", r.status, r.raw, api.CodeOverloaded)
	}
	h.untouched(t, waiting.ref, waiting.key)
	close(held.release)
	if r := <-done; r.status != http.StatusOK {
		t.Fatalf("the running admission: %d %s", r.status, r.raw)
	}
	h.finish(t)
}

// TestVerificationCacheMetrics: repeated caller, depositor and entitlement
// tokens are answered from the verification cache (counted per purpose);
// confirmations, single-use, have no cache at all.
func TestVerificationCacheMetrics(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	first, second := h.fixture(t), h.fixture(t)
	second.ent = first.ent
	h.allowed(t, first)
	h.allowed(t, second)
	body := h.metricsText(t)
	for _, want := range []string{
		`itogate_verification_cache_lookups_total{purpose="caller",result="hit"} 1`,
		`itogate_verification_cache_lookups_total{purpose="caller",result="miss"} 1`,
		`itogate_verification_cache_lookups_total{purpose="depositor",result="hit"} 1`,
		`itogate_verification_cache_lookups_total{purpose="depositor",result="miss"} 1`,
		`itogate_verification_cache_lookups_total{purpose="entitlement",result="hit"} 1`,
		`itogate_verification_cache_lookups_total{purpose="entitlement",result="miss"} 1`,
		`itogate_verification_cache_entries{purpose="entitlement"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, `itogate_verification_cache_lookups_total{purpose="confirmation"`) {
		t.Error("confirmations must have no verification cache")
	}
	h.finish(t)
}

// panicOnce panics in its first evaluation, then decides with the bundle.
type panicOnce struct {
	inner admission.Decider
	done  atomic.Bool
}

func (d *panicOnce) Decide(ctx context.Context, in map[string]any) (policy.Decision, error) {
	if d.done.CompareAndSwap(false, true) {
		panic("evaluation bug")
	}
	return d.inner.Decide(ctx, in)
}

func (d *panicOnce) Revision() string { return d.inner.Revision() }

func (d *panicOnce) Facts() *trainfacts.Model { return admission.FactsOf(d.inner) }

// TestPanicFreesTheSlot: an evaluation that panics (answered 500 by the
// recoverer) gives its slot back; with one slot, the next admission is
// evaluated instead of being shed for ever.
func TestPanicFreesTheSlot(t *testing.T) {
	d := &panicOnce{}
	h := newHostile(t, hostileOptions{
		policy:      func() admission.Decider { return d },
		evaluations: admission.Evaluations{Slots: 1, Queue: 1, Wait: 5 * time.Second},
	})
	d.inner = h.engine
	first, second := h.fixture(t), h.fixture(t)
	if r := h.admit(t, h.body(t, first, nil)); r.status != http.StatusInternalServerError || r.code() != api.CodeInternal {
		t.Fatalf("the panicking evaluation: %d %s, want 500 %s", r.status, r.raw, api.CodeInternal)
	}
	h.untouched(t, first.ref, first.key)
	h.allowed(t, second)
	h.waitForMetric(t, `itogate_policy_evaluations_in_flight{state="running"} 0`)
}
