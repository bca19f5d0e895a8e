package bundle_test

import (
	"context"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/policies"
)

// realBundle signs the policies of this repository as `make bundle` does.
func realBundle(t testing.TB, at time.Time) []byte {
	t.Helper()
	dev := bundletest.DevSigner()
	return bundletest.Build(t, bundletest.Spec{
		Files:    bundletest.FromFS(t, policies.Bundle()),
		Manifest: bundletest.Manifest(bundletest.Revision(at, "real"), at),
	}, &dev)
}

// The repository's policies, signed, pass every rule of the verifier and
// activate; their decision is the embedded bundle's.
func TestRealPoliciesBundle(t *testing.T) {
	t.Parallel()
	raw := realBundle(t, built)
	v, err := bundle.NewVerifier(bundle.VerifierOptions{Keys: []bundle.Key{bundle.DevKey()}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.Verify(raw, "test")
	if err != nil {
		t.Fatal(err)
	}
	m, err := bundle.NewManager(bundle.Options{Now: func() time.Time { return built }, Deadline: patience.Deadline})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Activate(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	emb, err := bundle.NewManager(bundle.Options{Source: bundle.NewEmbedded(policies.Bundle()), Deadline: patience.Deadline})
	if err != nil {
		t.Fatal(err)
	}
	if err := emb.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	in := map[string]any{"action": "train.create"}
	got, err1 := m.Active().Decide(context.Background(), factsFor(m.Active(), in))
	want, err2 := emb.Active().Decide(context.Background(), factsFor(emb.Active(), in))
	if err1 != nil || err2 != nil || got.Allow || len(got.Violations) != len(want.Violations) {
		t.Fatalf("signed %+v %v; embedded %+v %v", got, err1, want, err2)
	}
	for i := range got.Violations {
		if got.Violations[i] != want.Violations[i] {
			t.Fatalf("violation %d: %+v vs %+v", i, got.Violations[i], want.Violations[i])
		}
	}
}

// BenchmarkActivate is the cost of taking a new bundle: verify the archive
// (signature and every file hash) and compile the repository's policies.
func BenchmarkActivate(b *testing.B) {
	v, err := bundle.NewVerifier(bundle.VerifierOptions{Keys: []bundle.Key{bundle.DevKey()}})
	if err != nil {
		b.Fatal(err)
	}
	raws := make([][]byte, 0, 64)
	for i := range 64 {
		raws = append(raws, realBundle(b, built.Add(time.Duration(i)*time.Second)))
	}
	b.Run("verify", func(b *testing.B) {
		for b.Loop() {
			if _, err := v.Verify(raws[0], "bench"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("verify+compile+swap", func(b *testing.B) {
		i := 0
		for b.Loop() {
			m, _ := bundle.NewManager(bundle.Options{Deadline: patience.Deadline, Now: func() time.Time { return built.Add(time.Hour) }})
			bb, err := v.Verify(raws[i%len(raws)], "bench")
			if err != nil {
				b.Fatal(err)
			}
			if err := m.Activate(context.Background(), bb); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkDecide compares one evaluation against the embedded bundle and
// against the same policies activated from a signed archive: the engine is
// the same; the signed one only adds the max-age clock check.
func BenchmarkDecide(b *testing.B) {
	v, err := bundle.NewVerifier(bundle.VerifierOptions{Keys: []bundle.Key{bundle.DevKey()}})
	if err != nil {
		b.Fatal(err)
	}
	bb, err := v.Verify(realBundle(b, built), "bench")
	if err != nil {
		b.Fatal(err)
	}
	signedM, _ := bundle.NewManager(bundle.Options{Deadline: patience.Deadline, MaxAge: 24 * time.Hour,
		Now: func() time.Time { return built.Add(time.Hour) }})
	if err := signedM.Activate(context.Background(), bb); err != nil {
		b.Fatal(err)
	}
	embM, _ := bundle.NewManager(bundle.Options{Deadline: patience.Deadline, Source: bundle.NewEmbedded(policies.Bundle())})
	if err := embM.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	in := map[string]any{"action": "train.create", "now": built.Unix()}
	for name, m := range map[string]*bundle.Manager{"embedded": embM, "signed": signedM} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := m.Active().Decide(context.Background(), factsFor(m.Active(), in)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
