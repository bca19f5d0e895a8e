// Package bundletest builds and signs OPA bundles in-process for tests, with
// OPA's own Go API (bundle.Reader, (*Bundle).GenerateSignature,
// bundle.Writer) — the same code `opa build --signing-key` runs — and
// tampers with them.
package bundletest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	opabundle "github.com/open-policy-agent/opa/v1/bundle"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
)

// Signer is a bundle signing key.
type Signer struct {
	KeyID      string
	Algorithm  string
	PrivatePEM []byte
	// Key is the matching verification key.
	Key bundle.Key
}

// DevSigner is the published development bundle key (RS256).
func DevSigner() Signer {
	k := keys.Dev().Bundle
	return Signer{KeyID: k.KeyID, Algorithm: k.Algorithm, PrivatePEM: k.PrivatePEM, Key: bundle.DevKey()}
}

// NewSigner generates an ECDSA P-256 key (ES256) with the given key id. It
// panics if the system's randomness fails.
func NewSigner(keyID string) Signer {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		panic(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		panic(err)
	}
	return Signer{
		KeyID: keyID, Algorithm: "ES256",
		PrivatePEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		Key: bundle.Key{ID: keyID, Algorithm: "ES256",
			PEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})},
	}
}

// Spec is a bundle's content.
type Spec struct {
	// Files by path below the root: "ito/admission/admission.rego",
	// "ito/config/data.json".
	Files map[string]string
	// Manifest is the .manifest document; nil means
	// {"revision": Revision(BuiltAt, "test"), "roots": ["ito"],
	//  "metadata": {"built_at": BuiltAt}}.
	Manifest map[string]any
}

// Revision formats a revision as `make bundle` does.
func Revision(t time.Time, label string) string {
	return t.UTC().Format(bundle.RevisionLayout) + "-" + label
}

// Manifest is the standard .manifest of a bundle built at t.
func Manifest(revision string, builtAt time.Time) map[string]any {
	return map[string]any{
		"revision": revision,
		"roots":    []any{"ito"},
		"metadata": map[string]any{"built_at": builtAt.UTC().Format(time.RFC3339)},
	}
}

// Data is every data.json of fsys below ito/ but ito/testdata: the tables
// and constants of a production bundle (the training facts model, which the
// ledger's commit prices a run's expected lost work with), for a test
// bundle whose rules are its own. Keys are paths as Spec.Files takes them.
func Data(t testing.TB, fsys fs.FS) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := fs.WalkDir(fsys, "ito", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Base(p) != "data.json" || strings.HasPrefix(p, "ito/testdata/") {
			return err
		}
		raw, err := fs.ReadFile(fsys, p)
		out[p] = string(raw)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Decision is a minimal complete bundle whose decision allows (no codes) or
// denies with each code, whatever the input.
func Decision(codes ...string) map[string]string {
	var v []string
	for _, c := range codes {
		v = append(v, `{"code": "`+c+`", "gate": "test", "message": "`+c+`"}`)
	}
	allow := "true"
	if len(codes) > 0 {
		allow = "false"
	}
	files := map[string]string{
		"ito/admission/admission.rego": "package ito.admission\n\ndecision := {\"allow\": " + allow +
			", \"violations\": [" + strings.Join(v, ", ") + "]}\n",
		"ito/config/data.json": `{"note": "test bundle"}`,
		// policy.New refuses a bundle written for another training-facts model
		"ito/config/facts/data.json": fmt.Sprintf(`{"model_version": %d}`, trainfacts.Version),
	}
	// policy.New refuses a bundle without every gate's deny rule; give each
	// an empty one.
	for _, r := range policy.RequiredRules {
		ref := strings.TrimPrefix(r, "data.")
		i := strings.LastIndex(ref, ".")
		pkg, rule := ref[:i], ref[i+1:]
		if rule != "deny" {
			continue
		}
		name := strings.ReplaceAll(pkg, ".", "/")
		files[name+"/"+path.Base(name)+".rego"] = "package " + pkg + "\n\ndeny contains v if {\n\tv := input.never\n}\n"
	}
	return files
}

// FromFS copies a bundle tree (e.g. policies.Bundle()) into Spec.Files.
func FromFS(t testing.TB, fsys fs.FS) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Build reads spec with OPA, signs it with s (nil: unsigned) and writes the
// .tar.gz.
func Build(t testing.TB, spec Spec, s *Signer) []byte {
	t.Helper()
	fsys := fstest.MapFS{}
	for p, c := range spec.Files {
		fsys[p] = &fstest.MapFile{Data: []byte(c)}
	}
	man := spec.Manifest
	if man == nil {
		now := time.Now().UTC().Truncate(time.Second)
		man = Manifest(Revision(now, "test"), now)
	}
	mb, err := json.Marshal(man)
	if err != nil {
		t.Fatal(err)
	}
	fsys[".manifest"] = &fstest.MapFile{Data: mb}
	loader, err := opabundle.NewFSLoader(fsys)
	if err != nil {
		t.Fatal(err)
	}
	b, err := opabundle.NewCustomReader(loader).WithRegoVersion(ast.RegoV1).Read()
	if err != nil {
		t.Fatalf("bundletest: read: %v", err)
	}
	if s != nil {
		sc := opabundle.NewSigningConfig(string(s.PrivatePEM), s.Algorithm, "")
		if err := b.GenerateSignature(sc, s.KeyID, false); err != nil {
			t.Fatalf("bundletest: sign: %v", err)
		}
	}
	var buf bytes.Buffer
	if err := opabundle.NewWriter(&buf).Write(b); err != nil {
		t.Fatalf("bundletest: write: %v", err)
	}
	return buf.Bytes()
}

// Entry is one tar entry.
type Entry struct {
	Name     string
	Body     []byte
	Typeflag byte   // default tar.TypeReg
	Linkname string // for links
}

// Entries unpacks a .tar.gz (names as stored).
func Entries(t testing.TB, raw []byte) []Entry {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var out []Entry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Entry{Name: h.Name, Body: body, Typeflag: h.Typeflag, Linkname: h.Linkname})
	}
}

// Pack writes entries as a .tar.gz, in order.
func Pack(t testing.TB, entries []Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		typ := e.Typeflag
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.Name, Typeflag: typ, Mode: 0o644, Linkname: e.Linkname}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write(e.Body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Rewrite unpacks raw, lets edit change the files (keyed by stored name,
// e.g. "/ito/admission/admission.rego"; delete to remove) and packs them
// again in name order.
func Rewrite(t testing.TB, raw []byte, edit func(files map[string][]byte)) []byte {
	t.Helper()
	files := map[string][]byte{}
	for _, e := range Entries(t, raw) {
		files[e.Name] = e.Body
	}
	edit(files)
	var names []string
	for n := range maps.Keys(files) {
		names = append(names, n)
	}
	sort.Strings(names)
	var entries []Entry
	for _, n := range names {
		entries = append(entries, Entry{Name: n, Body: files[n]})
	}
	return Pack(t, entries)
}

// Resign replaces the .signatures.json of raw with a valid signature by s
// over the archive's files as they are, so a test can sign content OPA
// would refuse to build (a module that does not parse or compile).
func Resign(t testing.TB, raw []byte, s Signer) []byte {
	t.Helper()
	hasher, err := opabundle.NewSignatureHasher(opabundle.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	var files []opabundle.FileInfo
	var kept []Entry
	for _, e := range Entries(t, raw) {
		if strings.HasSuffix(e.Name, ".signatures.json") {
			continue
		}
		kept = append(kept, e)
		name := strings.TrimPrefix(e.Name, "/")
		var v any = e.Body
		if opabundle.IsStructuredDoc(name) {
			var doc any
			if err := json.Unmarshal(e.Body, &doc); err != nil {
				t.Fatal(err)
			}
			v = doc
		}
		sum, err := hasher.HashFile(v)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, opabundle.NewFile(name, hex.EncodeToString(sum), string(opabundle.SHA256)))
	}
	token, err := opabundle.GenerateSignedToken(files, opabundle.NewSigningConfig(string(s.PrivatePEM), s.Algorithm, ""), s.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	sigs, _ := json.Marshal(map[string]any{"signatures": []string{token}})
	return Pack(t, append(kept, Entry{Name: "/.signatures.json", Body: sigs}))
}

// Edited copies the bundle tree fsys (e.g. policies.Bundle()) with old
// replaced by replacement in file: the same rules with another table. It
// fails the test when file does not hold old, so an edit that no longer
// applies cannot leave the test running on the unchanged bundle.
func Edited(t testing.TB, fsys fs.FS, file, old, replacement string) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		if p == file {
			if !strings.Contains(string(data), old) {
				return fmt.Errorf("%s does not hold %q", file, old)
			}
			data = []byte(strings.ReplaceAll(string(data), old, replacement))
		}
		out[p] = &fstest.MapFile{Data: data}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if out[file] == nil {
		t.Fatalf("bundle has no %s", file)
	}
	return out
}
