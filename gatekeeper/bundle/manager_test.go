package bundle_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/policies"
)

// Active fits admission.Options.Policy as serve wires it, though bundle does
// not import admission: both name the same interface literal.
var _ func(*bundle.Manager) admission.Decider = (*bundle.Manager).Active

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// observer records bundle events like the Prometheus metrics do.
type observer struct {
	mu          sync.Mutex
	activations map[string]int // "result/reason"
	revision    string
	builtAt     time.Time
}

func (o *observer) BundleActivation(result, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.activations == nil {
		o.activations = map[string]int{}
	}
	o.activations[result+"/"+reason]++
}

func (o *observer) BundleActive(revision, _ string, builtAt time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.revision, o.builtAt = revision, builtAt
}

func (o *observer) count(key string) int { o.mu.Lock(); defer o.mu.Unlock(); return o.activations[key] }

// sourceFunc adapts a function to bundle.Source.
type sourceFunc func(ctx context.Context) (*bundle.Bundle, error)

func (f sourceFunc) Fetch(ctx context.Context) (*bundle.Bundle, error) { return f(ctx) }
func (sourceFunc) String() string                                      { return "test" }

// signed builds and verifies a bundle built at t whose decision denies with
// codes (allows without).
func signed(t testing.TB, at time.Time, label string, codes ...string) *bundle.Bundle {
	t.Helper()
	raw := bundletest.Build(t, bundletest.Spec{Files: bundletest.Decision(codes...),
		Manifest: bundletest.Manifest(bundletest.Revision(at, label), at)}, &signerA)
	b, err := verifier(t, bundle.VerifierOptions{}).Verify(raw, "test")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newManager(t testing.TB, c *clock, maxAge time.Duration, o *observer) *bundle.Manager {
	t.Helper()
	opts := bundle.Options{
		Source: sourceFunc(func(context.Context) (*bundle.Bundle, error) { return nil, nil }),
		MaxAge: maxAge,
		Now:    c.Now,
		// Generous: -race on a loaded machine is slow; deadlines are tested
		// in gatekeeper/policy.
		Deadline: patience.Deadline,
	}
	if o != nil {
		opts.Observer = o
	}
	m, err := bundle.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func decide(t testing.TB, m *bundle.Manager) (policy.Decision, error) {
	t.Helper()
	d := m.Active()
	if d == nil {
		t.Fatal("no active decider")
	}
	return d.Decide(context.Background(), factsFor(d, map[string]any{}))
}

// factsFor is in with the training facts of d's bundle, as the admission
// builds every input (admission.WithFacts).
func factsFor(d any, in map[string]any) map[string]any {
	return admission.WithFactsCopy(in, admission.FactsOf(d))
}

func TestManagerNotReadyWithoutBundle(t *testing.T) {
	t.Parallel()
	c := &clock{now: built}
	m := newManager(t, c, 0, nil)
	if m.Active() != nil {
		t.Fatal("a decider without a bundle")
	}
	if !errors.Is(m.Ready(), bundle.ErrNotReady) {
		t.Fatalf("Ready = %v", m.Ready())
	}
	if _, ok := m.Info(); ok {
		t.Fatal("info without a bundle")
	}
}

// Anti-rollback: revisions only move forward; the same bytes again are a
// no-op; the same revision with other bytes is refused. The last good
// bundle stays active through every refusal.
func TestManagerRefusesRollback(t *testing.T) {
	t.Parallel()
	c := &clock{now: built.Add(time.Hour)}
	o := &observer{}
	m := newManager(t, c, 0, o)
	ctx := context.Background()
	v2 := signed(t, built.Add(2*time.Minute), "v2")
	v2digest := v2.Digest
	if err := m.Activate(ctx, v2); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		b    *bundle.Bundle
		want bundle.Reason
	}{
		{"older revision", signed(t, built.Add(time.Minute), "v1"), bundle.ReasonRollback},
		{"same timestamp, other label", signed(t, built.Add(2*time.Minute), "v2b"), bundle.ReasonRollback},
		{"same revision, other bytes", signed(t, built.Add(2*time.Minute), "v2", "CHANGED"), bundle.ReasonRevisionReused},
	}
	for _, tc := range cases {
		err := m.Activate(ctx, tc.b)
		if got := reasonOf(err); got != tc.want {
			t.Fatalf("%s: reason %q, want %q (%v)", tc.name, got, tc.want, err)
		}
		if info, _ := m.Info(); info.Digest != v2digest {
			t.Fatalf("%s: active bundle changed to %s", tc.name, info.Revision)
		}
	}
	// The same bundle again (a server without ETags) changes nothing.
	again := signed(t, built.Add(2*time.Minute), "v2")
	if again.Digest == v2digest {
		if err := m.Activate(ctx, again); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Activate(ctx, signed(t, built.Add(3*time.Minute), "v3")); err != nil {
		t.Fatal(err)
	}
	if info, _ := m.Info(); !strings.HasSuffix(info.Revision, "-v3") {
		t.Fatalf("active %s", info.Revision)
	}
	if o.count("success/") != 2 || o.count("failure/rollback") != 2 || o.count("failure/revision_reused") != 1 {
		t.Fatalf("activations %v", o.activations)
	}
	if !strings.HasSuffix(o.revision, "-v3") {
		t.Fatalf("observer revision %s", o.revision)
	}
}

// Max age counts from the signed built_at: a bundle already too old is not
// activated; the active bundle turns stale, fails readiness and decides
// nothing (POLICY_BUNDLE_STALE) until a newer one arrives.
func TestManagerMaxAge(t *testing.T) {
	t.Parallel()
	c := &clock{now: built.Add(time.Hour)}
	o := &observer{}
	m := newManager(t, c, 24*time.Hour, o)
	ctx := context.Background()

	if err := m.Activate(ctx, signed(t, built.Add(-25*time.Hour), "old")); reasonOf(err) != bundle.ReasonStale {
		t.Fatalf("too old: %v", err)
	}
	if err := m.Activate(ctx, signed(t, c.Now().Add(time.Hour), "future")); reasonOf(err) != bundle.ReasonFuture {
		t.Fatalf("future: %v", err)
	}
	// A little clock skew is tolerated.
	if err := m.Activate(ctx, signed(t, c.Now().Add(time.Minute), "skewed")); err != nil {
		t.Fatalf("skewed: %v", err)
	}
	if err := m.Ready(); err != nil {
		t.Fatal(err)
	}
	if d, err := decide(t, m); err != nil || !d.Allow {
		t.Fatalf("fresh: %+v %v", d, err)
	}
	info, _ := m.Info()
	if !info.Expires.Equal(info.BuiltAt.Add(24 * time.Hour)) {
		t.Fatalf("expires %v", info.Expires)
	}

	c.Advance(25 * time.Hour)
	if err := m.Ready(); err == nil || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("Ready = %v", err)
	}
	d, err := decide(t, m)
	var pe *policy.Error
	if !errors.As(err, &pe) || pe.Code != api.CodePolicyBundleStale || d.Allow {
		t.Fatalf("stale decide = %+v, %v", d, err)
	}

	// A newer bundle ends the staleness.
	if err := m.Activate(ctx, signed(t, c.Now().Add(-time.Minute), "new")); err != nil {
		t.Fatal(err)
	}
	if err := m.Ready(); err != nil {
		t.Fatal(err)
	}
	if o.count("failure/stale") != 1 || o.count("failure/future") != 1 || o.count("success/") != 2 {
		t.Fatalf("activations %v", o.activations)
	}
}

// A signed bundle that does not compile is refused; the previous one stays.
func TestManagerKeepsLastGoodBundle(t *testing.T) {
	t.Parallel()
	c := &clock{now: built.Add(time.Hour)}
	m := newManager(t, c, 0, nil)
	ctx := context.Background()
	if err := m.Activate(ctx, signed(t, built, "good")); err != nil {
		t.Fatal(err)
	}
	raw := bundletest.Build(t, bundletest.Spec{Files: bundletest.Decision(),
		Manifest: bundletest.Manifest(bundletest.Revision(built.Add(time.Minute), "broken"), built.Add(time.Minute))}, &signerA)
	raw = bundletest.Resign(t, bundletest.Rewrite(t, raw, func(f map[string][]byte) {
		f["/ito/admission/admission.rego"] = []byte("package ito.admission\n\ndecision := undefined_function(1)\n")
	}), signerA)
	b, err := verifier(t, bundle.VerifierOptions{}).Verify(raw, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Activate(ctx, b); reasonOf(err) != bundle.ReasonCompile {
		t.Fatalf("compile: %v", err)
	}
	if info, _ := m.Info(); !strings.HasSuffix(info.Revision, "-good") {
		t.Fatalf("active %s", info.Revision)
	}
	if d, err := decide(t, m); err != nil || !d.Allow || !strings.HasSuffix(d.BundleRevision, "-good") {
		t.Fatalf("decide %+v %v", d, err)
	}
}

// A signed bundle written for another training-facts model (its
// data.ito.config.facts.model_version) is refused at activation with its
// own reason; the previous bundle stays and keeps deciding.
func TestManagerRefusesAnotherFactsModel(t *testing.T) {
	t.Parallel()
	o := &observer{}
	c := &clock{now: built.Add(time.Hour)}
	m := newManager(t, c, 0, o)
	ctx := context.Background()
	if err := m.Activate(ctx, signed(t, built, "good")); err != nil {
		t.Fatal(err)
	}
	another := fmt.Sprintf(`{"model_version": %d}`, trainfacts.Version+1)
	for i, version := range []string{another, `{"model_version": "1"}`, `{"note": "no facts model"}`} {
		at := built.Add(time.Duration(i+1) * time.Minute)
		raw := bundletest.Build(t, bundletest.Spec{Files: bundletest.Decision(),
			Manifest: bundletest.Manifest(bundletest.Revision(at, "other-facts"), at)}, &signerA)
		raw = bundletest.Resign(t, bundletest.Rewrite(t, raw, func(f map[string][]byte) {
			f["/data.json"] = []byte(`{"ito": {"config": {"facts": ` + version + `}}}`)
		}), signerA)
		b, err := verifier(t, bundle.VerifierOptions{}).Verify(raw, "test")
		if err != nil {
			t.Fatal(err)
		}
		err = m.Activate(ctx, b)
		if reasonOf(err) != bundle.ReasonFactsModel || !errors.Is(err, policy.ErrFactsModel) {
			t.Fatalf("facts model %s: %v", version, err)
		}
	}
	if info, _ := m.Info(); !strings.HasSuffix(info.Revision, "-good") {
		t.Fatalf("active %s", info.Revision)
	}
	if d, err := decide(t, m); err != nil || !d.Allow {
		t.Fatalf("decide %+v %v", d, err)
	}
	if o.count("failure/facts_model") != 3 {
		t.Fatalf("activations %v", o.activations)
	}
}

// The embedded bundle activates without signature, revision order or age.
func TestManagerEmbedded(t *testing.T) {
	t.Parallel()
	m, err := bundle.NewManager(bundle.Options{Deadline: patience.Deadline, Source: bundle.NewEmbedded(policies.Bundle())})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	info, ok := m.Info()
	if !ok || info.Origin != "embedded" || info.KeyID != "" || !strings.HasPrefix(info.Digest, "sha256:") || m.Ready() != nil {
		t.Fatalf("info %+v", info)
	}
	// Nothing changes on the next poll.
	if err := m.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	// With a max age, an undated bundle is refused.
	m2, _ := bundle.NewManager(bundle.Options{Deadline: patience.Deadline, Source: bundle.NewEmbedded(policies.Bundle()), MaxAge: time.Hour})
	if err := m2.Load(context.Background()); reasonOf(err) != bundle.ReasonManifest {
		t.Fatalf("embedded with max age: %v", err)
	}
}

// Load reports a source failure, keeps the active bundle, and counts the
// failure by reason.
func TestManagerLoadFailureKeepsActive(t *testing.T) {
	t.Parallel()
	o := &observer{}
	var calls atomic.Int32
	good := signed(t, built, "good")
	m, err := bundle.NewManager(bundle.Options{Deadline: patience.Deadline, Observer: o, Now: (&clock{now: built}).Now,
		Source: sourceFunc(func(context.Context) (*bundle.Bundle, error) {
			if calls.Add(1) == 1 {
				return good, nil
			}
			return nil, &bundle.Error{Reason: bundle.ReasonSignature, Err: fmt.Errorf("digest mismatch")}
		})})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Load(context.Background()); reasonOf(err) != bundle.ReasonSignature {
		t.Fatalf("second load: %v", err)
	}
	if m.Ready() != nil || o.count("failure/signature") != 1 {
		t.Fatalf("ready %v, activations %v", m.Ready(), o.activations)
	}
}
