package bundle_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
)

var (
	signerA = bundletest.NewSigner("test-a")
	signerB = bundletest.NewSigner("test-b")
)

func verifier(t testing.TB, opts bundle.VerifierOptions) *bundle.Verifier {
	t.Helper()
	if opts.Keys == nil {
		opts.Keys = []bundle.Key{signerA.Key}
	}
	v, err := bundle.NewVerifier(opts)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func reasonOf(err error) bundle.Reason {
	var be *bundle.Error
	if errors.As(err, &be) {
		return be.Reason
	}
	return ""
}

var built = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func goodSpec() bundletest.Spec {
	files := bundletest.Decision()
	files["ito/lib/lib.rego"] = "package ito.lib\n\nanswer := 42\n"
	return bundletest.Spec{Files: files, Manifest: bundletest.Manifest(bundletest.Revision(built, "v1"), built)}
}

func TestVerifyAcceptsASignedBundle(t *testing.T) {
	t.Parallel()
	raw := bundletest.Build(t, goodSpec(), &signerA)
	b, err := verifier(t, bundle.VerifierOptions{}).Verify(raw, "test")
	if err != nil {
		t.Fatal(err)
	}
	if b.Revision != "20261129T120000Z-v1" || !b.RevisionTime.Equal(built) || !b.BuiltAt.Equal(built) ||
		b.KeyID != "test-a" || b.Digest != bundle.Digest(raw) || b.Origin != "test" || !b.Signed() {
		t.Fatalf("bundle %+v", b)
	}
}

// Every tampering, malformed archive and manifest problem is refused with
// its reason.
func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	good := bundletest.Build(t, goodSpec(), &signerA)
	rewrite := func(edit func(map[string][]byte)) []byte { return bundletest.Rewrite(t, good, edit) }
	withEntries := func(extra ...bundletest.Entry) []byte {
		return bundletest.Pack(t, append(bundletest.Entries(t, good), extra...))
	}
	signedManifest := func(m map[string]any) []byte {
		s := goodSpec()
		s.Manifest = m
		return bundletest.Build(t, s, &signerA)
	}
	signedFiles := func(edit func(map[string]string)) []byte {
		s := goodSpec()
		edit(s.Files)
		return bundletest.Build(t, s, &signerA)
	}
	rev := bundletest.Revision(built, "v1")
	var gzBomb bytes.Buffer
	{
		gz := gzip.NewWriter(&gzBomb)
		tw := tar.NewWriter(gz)
		_ = tw.WriteHeader(&tar.Header{Name: "/ito/big.rego", Typeflag: tar.TypeReg, Size: 2 << 20, Mode: 0o644})
		_, _ = tw.Write(make([]byte, 2<<20))
		_ = tw.Close()
		_ = gz.Close()
	}
	many := bundletest.Entries(t, good)
	for i := 0; i < 20; i++ {
		many = append(many, bundletest.Entry{Name: "/ito/x" + strings.Repeat("y", i) + ".rego", Body: []byte("package ito.x\n")})
	}

	cases := []struct {
		name string
		raw  []byte
		opts bundle.VerifierOptions
		want bundle.Reason
	}{
		// tampering with a signed bundle
		{"rego file added", rewrite(func(f map[string][]byte) {
			f["/ito/extra.rego"] = []byte("package ito.extra\n\nx := 1\n")
		}), bundle.VerifierOptions{}, bundle.ReasonSignature},
		{"data file added", rewrite(func(f map[string][]byte) {
			f["/ito/extra/data.json"] = []byte(`{"x": 1}`)
		}), bundle.VerifierOptions{}, bundle.ReasonSignature},
		{"other file added", rewrite(func(f map[string][]byte) { f["/README.md"] = []byte("hi") }),
			bundle.VerifierOptions{}, bundle.ReasonArchive},
		{"file removed", rewrite(func(f map[string][]byte) { delete(f, "/ito/lib/lib.rego") }),
			bundle.VerifierOptions{}, bundle.ReasonSignature},
		{"rego changed", rewrite(func(f map[string][]byte) {
			f["/ito/admission/admission.rego"] = bytes.Replace(f["/ito/admission/admission.rego"], []byte("true"), []byte("false"), 1)
		}), bundle.VerifierOptions{}, bundle.ReasonSignature},
		{"data changed", rewrite(func(f map[string][]byte) { f["/data.json"] = []byte(`{"ito": {"config": {"note": "evil"}}}`) }),
			bundle.VerifierOptions{}, bundle.ReasonSignature},
		{"manifest changed (revision bumped)", rewrite(func(f map[string][]byte) {
			f["/.manifest"] = bytes.Replace(f["/.manifest"], []byte("20261129T120000Z"), []byte("20301129T120000Z"), 1)
		}), bundle.VerifierOptions{}, bundle.ReasonSignature},
		{"signature stripped", rewrite(func(f map[string][]byte) { delete(f, "/.signatures.json") }),
			bundle.VerifierOptions{}, bundle.ReasonUnsigned},
		{"signature emptied", rewrite(func(f map[string][]byte) { f["/.signatures.json"] = []byte(`{"signatures": []}`) }),
			bundle.VerifierOptions{}, bundle.ReasonUnsigned},
		{"signature garbled", rewrite(func(f map[string][]byte) {
			f["/.signatures.json"] = []byte(`{"signatures": ["eyJhbGciOiJub25lIn0.e30."]}`)
		}), bundle.VerifierOptions{}, bundle.ReasonSignature},
		{"two signatures", rewrite(func(f map[string][]byte) {
			var sc struct{ Signatures []string }
			_ = json.Unmarshal(f["/.signatures.json"], &sc)
			f["/.signatures.json"], _ = json.Marshal(map[string]any{"signatures": []string{sc.Signatures[0], sc.Signatures[0]}})
		}), bundle.VerifierOptions{}, bundle.ReasonSignature},
		{"signature plugin", rewrite(func(f map[string][]byte) {
			var sc map[string]any
			_ = json.Unmarshal(f["/.signatures.json"], &sc)
			sc["plugin"] = "custom"
			f["/.signatures.json"], _ = json.Marshal(sc)
		}), bundle.VerifierOptions{}, bundle.ReasonSignature},
		{"signature from another bundle", rewrite(func(f map[string][]byte) {
			other := signedFiles(func(f map[string]string) { f["ito/lib/lib.rego"] = "package ito.lib\n\nanswer := 43\n" })
			for _, e := range bundletest.Entries(t, other) {
				if e.Name == "/.signatures.json" {
					f[e.Name] = e.Body
				}
			}
		}), bundle.VerifierOptions{}, bundle.ReasonSignature},
		{"unsigned with keys configured", bundletest.Build(t, goodSpec(), nil), bundle.VerifierOptions{}, bundle.ReasonUnsigned},
		{"wrong key (unknown kid)", bundletest.Build(t, goodSpec(), &signerB), bundle.VerifierOptions{}, bundle.ReasonSignature},
		{"wrong key (known kid)", func() []byte {
			impostor := signerB
			impostor.KeyID = "test-a"
			return bundletest.Build(t, goodSpec(), &impostor)
		}(), bundle.VerifierOptions{}, bundle.ReasonSignature},
		{"development key not configured", bundletest.Build(t, goodSpec(), ptr(bundletest.DevSigner())),
			bundle.VerifierOptions{}, bundle.ReasonSignature},
		{"scope mismatch", good, bundle.VerifierOptions{Scope: "production"}, bundle.ReasonSignature},

		// paths
		{"parent escape", withEntries(bundletest.Entry{Name: "/../evil.rego", Body: []byte("package ito.evil\n")}),
			bundle.VerifierOptions{}, bundle.ReasonPath},
		{"inner escape", withEntries(bundletest.Entry{Name: "ito/../../evil.rego", Body: []byte("package ito.evil\n")}),
			bundle.VerifierOptions{}, bundle.ReasonPath},
		{"absolute path", withEntries(bundletest.Entry{Name: "//etc/ito.rego", Body: []byte("package ito.evil\n")}),
			bundle.VerifierOptions{}, bundle.ReasonPath},
		{"dot segment", withEntries(bundletest.Entry{Name: "/ito/./x.rego", Body: []byte("package ito.x\n")}),
			bundle.VerifierOptions{}, bundle.ReasonPath},
		{"backslash", withEntries(bundletest.Entry{Name: `/ito\..\..\x.rego`, Body: []byte("package ito.x\n")}),
			bundle.VerifierOptions{}, bundle.ReasonPath},
		{"symlink", withEntries(bundletest.Entry{Name: "/ito/link.rego", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}),
			bundle.VerifierOptions{}, bundle.ReasonPath},
		{"hard link", withEntries(bundletest.Entry{Name: "/ito/link.rego", Typeflag: tar.TypeLink, Linkname: "../../x"}),
			bundle.VerifierOptions{}, bundle.ReasonPath},
		{"what opa build -b ../dir writes", bundletest.Pack(t, func() []bundletest.Entry {
			var out []bundletest.Entry
			for _, e := range bundletest.Entries(t, good) {
				if strings.HasPrefix(e.Name, "/ito/") {
					e.Name = "/../../tmp/stage" + e.Name
				}
				out = append(out, e)
			}
			return out
		}()), bundle.VerifierOptions{}, bundle.ReasonPath},

		// archive
		{"not gzip", []byte("plain text"), bundle.VerifierOptions{}, bundle.ReasonArchive},
		{"gzip of garbage", func() []byte {
			var b bytes.Buffer
			gz := gzip.NewWriter(&b)
			_, _ = gz.Write(bytes.Repeat([]byte{0xff}, 1024))
			_ = gz.Close()
			return b.Bytes()
		}(), bundle.VerifierOptions{}, bundle.ReasonArchive},
		{"duplicate entry", withEntries(bundletest.Entry{Name: "/ito/lib/lib.rego", Body: []byte("package ito.lib\n\nanswer := 0\n")}),
			bundle.VerifierOptions{}, bundle.ReasonArchive},
		{"signatures below the root", withEntries(bundletest.Entry{Name: "/ito/.signatures.json", Body: []byte(`{}`)}),
			bundle.VerifierOptions{}, bundle.ReasonArchive},
		{"manifest below the root", withEntries(bundletest.Entry{Name: "/ito/x.manifest", Body: []byte(`{}`)}),
			bundle.VerifierOptions{}, bundle.ReasonArchive},
		{"fifo", withEntries(bundletest.Entry{Name: "/ito/fifo", Typeflag: tar.TypeFifo}),
			bundle.VerifierOptions{}, bundle.ReasonArchive},
		{"archive too large", good, bundle.VerifierOptions{MaxBytes: 64}, bundle.ReasonTooLarge},
		{"unpacked too large", gzBomb.Bytes(), bundle.VerifierOptions{MaxUnpackedBytes: 1 << 20}, bundle.ReasonTooLarge},
		{"too many files", bundletest.Pack(t, many), bundle.VerifierOptions{MaxFiles: 10}, bundle.ReasonTooLarge},

		// signed, but not what itogate enforces
		{"revision missing", signedManifest(map[string]any{"roots": []any{"ito"},
			"metadata": map[string]any{"built_at": built.Format(time.RFC3339)}}), bundle.VerifierOptions{}, bundle.ReasonManifest},
		{"revision without timestamp", signedManifest(bundletest.Manifest("v1.2.3", built)), bundle.VerifierOptions{}, bundle.ReasonManifest},
		{"built_at missing", signedManifest(map[string]any{"revision": rev, "roots": []any{"ito"}}),
			bundle.VerifierOptions{}, bundle.ReasonManifest},
		{"built_at not RFC 3339", signedManifest(map[string]any{"revision": rev, "roots": []any{"ito"},
			"metadata": map[string]any{"built_at": "yesterday"}}), bundle.VerifierOptions{}, bundle.ReasonManifest},
		{"roots missing", signedManifest(map[string]any{"revision": rev,
			"metadata": map[string]any{"built_at": built.Format(time.RFC3339)}}), bundle.VerifierOptions{}, bundle.ReasonManifest},
		{"root outside ito", signedManifest(map[string]any{"revision": rev, "roots": []any{"ito", "system"},
			"metadata": map[string]any{"built_at": built.Format(time.RFC3339)}}), bundle.VerifierOptions{}, bundle.ReasonManifest},
		{"rego v0", bundletest.Build(t, bundletest.Spec{
			Files: map[string]string{"ito/admission/admission.rego": "package ito.admission\n\ndecision := {\"allow\": true}\n"},
			Manifest: map[string]any{"revision": rev, "roots": []any{"ito"}, "rego_version": 0,
				"metadata": map[string]any{"built_at": built.Format(time.RFC3339)}}}, &signerA), bundle.VerifierOptions{}, bundle.ReasonManifest},
		{"no entrypoint", signedFiles(func(f map[string]string) {
			f["ito/admission/admission.rego"] = "package ito.admission\n\ndecison := {\"allow\": true, \"violations\": []}\n"
		}), bundle.VerifierOptions{}, bundle.ReasonManifest},
		{"rego does not parse", func() []byte {
			raw := bundletest.Build(t, goodSpec(), &signerA)
			// Re-sign a broken module: the signature is valid, the Rego is not.
			return bundletest.Resign(t, bundletest.Rewrite(t, raw, func(f map[string][]byte) {
				f["/ito/lib/lib.rego"] = []byte("package ito.lib\n\nanswer := \n")
			}), signerA)
		}(), bundle.VerifierOptions{}, bundle.ReasonInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := verifier(t, tc.opts).Verify(tc.raw, "test")
			if err == nil {
				t.Fatalf("accepted: %+v", b)
			}
			if got := reasonOf(err); got != tc.want {
				t.Fatalf("reason %q, want %q (%v)", got, tc.want, err)
			}
			t.Logf("%v", err)
			if strings.Contains(err.Error(), "PRIVATE") || strings.Contains(err.Error(), "BEGIN") {
				t.Fatalf("error echoes key material: %v", err)
			}
		})
	}
}

// Key rotation: every configured key verifies the bundles it signed, chosen
// by the signature's kid.
func TestVerifyKeyRotation(t *testing.T) {
	t.Parallel()
	v := verifier(t, bundle.VerifierOptions{Keys: []bundle.Key{signerA.Key, signerB.Key}})
	for _, s := range []bundletest.Signer{signerA, signerB} {
		b, err := v.Verify(bundletest.Build(t, goodSpec(), &s), "test")
		if err != nil || b.KeyID != s.KeyID {
			t.Fatalf("%s: %v %+v", s.KeyID, err, b)
		}
	}
	// The signature made by `make bundle` with the RS256 development key.
	dev := bundletest.DevSigner()
	b, err := verifier(t, bundle.VerifierOptions{Keys: []bundle.Key{dev.Key}}).Verify(bundletest.Build(t, goodSpec(), &dev), "test")
	if err != nil || b.KeyID != "dev-bundle-1" {
		t.Fatalf("dev key: %v", err)
	}
}

func TestNewVerifierRefusesBadKeys(t *testing.T) {
	t.Parallel()
	cases := map[string][]bundle.Key{
		"no keys":          nil,
		"empty kid":        {{Algorithm: "ES256", PEM: signerA.Key.PEM}},
		"duplicate kid":    {signerA.Key, signerA.Key},
		"hmac":             {{ID: "h", Algorithm: "HS256", PEM: []byte("secret")}},
		"alg does not fit": {{ID: "x", Algorithm: "RS256", PEM: signerA.Key.PEM}},
		"private key":      {{ID: "x", Algorithm: "ES256", PEM: signerA.PrivatePEM}},
		"none":             {{ID: "x", Algorithm: "none", PEM: signerA.Key.PEM}},
	}
	for name, ks := range cases {
		if name == "no keys" {
			ks = []bundle.Key{}
		}
		if _, err := bundle.NewVerifier(bundle.VerifierOptions{Keys: ks}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseRevision(t *testing.T) {
	t.Parallel()
	good := map[string]time.Time{
		"20261129T120000Z":                             built,
		"20261129T120000Z-v0.3.0-4-gabc1234":           built,
		"20261129T120000Z-abc1234-dirty":               built,
		"20261129T120001Z-rc.1+build_7":                built.Add(time.Second),
		"19991231T235959Z-y2k":                         time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC),
		"20261129T120000Z-" + strings.Repeat("a", 100): built,
	}
	for rev, want := range good {
		got, err := ParseRevisionT(rev)
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: %v %v", rev, got, err)
		}
	}
	for _, rev := range []string{"", "1", "v1.2.3", "2026-11-29T12:00:00Z", "20261129T120000", "20261129T120000Z-",
		"20261129T120000Z_x", "20261329T120000Z", "20261129T120000Z-" + strings.Repeat("a", 101), "20261129T120000Z-a/b"} {
		if _, err := ParseRevisionT(rev); err == nil {
			t.Errorf("%q accepted", rev)
		}
	}
}

// ParseRevisionT keeps the table above short.
var ParseRevisionT = bundle.ParseRevision

func ptr[T any](v T) *T { return &v }
