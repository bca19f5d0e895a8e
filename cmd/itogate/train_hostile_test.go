//go:build unix

package main

// The client's manifest reader (docs/security.md §7) through the real CLI: `itogate
// train` and `itogate sign` refuse every unsafe manifest path with its
// coded message and exit status before anything is sent or signed, and a
// file swapped for a symlink while the client runs yields the opened
// regular file's bytes or a coded refusal, never the symlink target's.

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/internal/patience"
)

// admissionSink is a stand-in itogate that records each admission's
// manifest bytes by idempotency key and answers allow.
type admissionSink struct {
	srv  *httptest.Server
	hits atomic.Int64
	mu   sync.Mutex
	got  map[string][]byte
}

func newSink(t *testing.T) *admissionSink {
	t.Helper()
	s := &admissionSink{got: map[string][]byte{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		var b struct {
			Key      string `json:"idempotency_key"`
			Manifest string `json:"manifest"`
		}
		_ = json.NewDecoder(r.Body).Decode(&b)
		raw, _ := base64.StdEncoding.DecodeString(b.Manifest)
		s.mu.Lock()
		s.got[b.Key] = raw
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true,"live_api_contacted":false,"notice":"","data":{"decision":"allow","action":"train.create",` +
			`"run_id":"run_test","state":"admitted","decision_id":"dec_test"}}`))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *admissionSink) manifest(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.got[key]
	return b, ok
}

// clientFiles writes the caller token, entitlement and a signature file the
// train command reads (their contents do not matter to the stand-in).
func clientFiles(t *testing.T, dir string) (tokenFile, entFile, sigFile string) {
	t.Helper()
	tokenFile, entFile, sigFile = filepath.Join(dir, "caller.jwt"), filepath.Join(dir, "ent.jwt"), filepath.Join(dir, "m.sig")
	for _, f := range []string{tokenFile, entFile, sigFile} {
		if err := os.WriteFile(f, []byte("eyJhbGciOiJFUzI1NiJ9.e30.c2ln\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return
}

func (s *admissionSink) train(t *testing.T, dir, path, key string) cliResult {
	t.Helper()
	tok, ent, sig := clientFiles(t, dir)
	return runCLI(t, "train", "--server", s.srv.URL, "--token-file", tok, "--entitlement-file", ent,
		"--booking", "bk_demo_01", "--manifest", path, "--signature", sig, "--confirmation-ref",
		"cfr_"+strings.Repeat("0", 32), "--idempotency-key", key, "--timeout", "10s")
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestCLIHostileManifestPaths: every unsafe manifest path, through `itogate
// train` (exit 4, the code on stderr, nothing sent) and `itogate sign`
// (exit 1, the code in the error, no signature written).
func TestCLIHostileManifestPaths(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"))
	if err != nil {
		t.Fatal(err)
	}
	cases, canChown := hostileManifestTree(t, dir, content)
	sink := newSink(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needChown && !canChown {
				t.Skip("cannot chown to another user here (not root)")
			}
			checkHostileManifestPath(t, sink, dir, tc)
		})
	}
	if n := sink.hits.Load(); n != 0 {
		t.Fatalf("refused manifests reached the server %d times", n)
	}
	// Controls: the same reader accepts the safe forms, and what it sends is
	// exactly the file's bytes with the digest it printed.
	for _, p := range []string{filepath.Join(dir, "m.json"), filepath.Join(dir, "sticky", "m.json"), dir + "//real/../m.json"} {
		key := "k-ok-" + hex.EncodeToString([]byte(p))[:16]
		res := sink.train(t, dir, p, key)
		got, sent := sink.manifest(key)
		if res.exit != 0 || !sent || !bytes.Equal(got, content) || !strings.Contains(res.stderr, sha(content)) {
			t.Fatalf("train %s: exit %d, stderr %q, sent %v", p, res.exit, res.stderr, sent)
		}
	}
	// A relative path resolved through a symlinked working directory
	// component is refused as well.
	t.Run("relative path through a symlink", func(t *testing.T) {
		t.Chdir(dir)
		res := sink.train(t, dir, "alias/m.json", "k-rel")
		if res.exit != exitFailed || !strings.Contains(res.stderr, string(api.CodeManifestPathSymlink)) {
			t.Fatalf("train: exit %d, stderr %q", res.exit, res.stderr)
		}
	})
}

// hostilePath is one unsafe manifest path and the code that refuses it.
type hostilePath struct {
	name, path string
	code       api.Code
	needChown  bool
}

// hostileManifestTree lays out, under dir, a safe manifest (m.json, and
// real/m.json, sticky/m.json) beside every unsafe form of a manifest path,
// and returns those with their codes; canChown reports whether the file
// owned by another user could be made.
func hostileManifestTree(t *testing.T, dir string, content []byte) (cases []hostilePath, canChown bool) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	writeMode(t, filepath.Join(dir, "m.json"), content, 0o600)
	must(os.Mkdir(filepath.Join(dir, "real"), 0o700))
	writeMode(t, filepath.Join(dir, "real", "m.json"), content, 0o600)
	must(os.Symlink(filepath.Join(dir, "real", "m.json"), filepath.Join(dir, "link.json")))
	must(os.Symlink("m.json", filepath.Join(dir, "rel-link.json"))) // relative, in-tree
	must(os.Symlink("real", filepath.Join(dir, "alias")))
	must(os.Symlink(".", filepath.Join(dir, "self")))
	must(unix.Mkfifo(filepath.Join(dir, "fifo.json"), 0o600))
	sparse := filepath.Join(dir, "sparse.json")
	writeMode(t, sparse, nil, 0o600)
	must(os.Truncate(sparse, 1<<40)) // 1 TiB of holes
	writeMode(t, filepath.Join(dir, "big.json"), bytes.Repeat([]byte(" "), manifest.MaxBytes+1), 0o600)
	writeMode(t, filepath.Join(dir, "group-writable.json"), content, 0o620)
	writeMode(t, filepath.Join(dir, "world-writable.json"), content, 0o602)
	for name, mode := range map[string]os.FileMode{"open": 0o777, "sticky": 0o777 | os.ModeSticky} {
		must(os.Mkdir(filepath.Join(dir, name), 0o700))
		must(os.Chmod(filepath.Join(dir, name), mode))
		writeMode(t, filepath.Join(dir, name, "m.json"), content, 0o600)
	}
	foreign := filepath.Join(dir, "foreign.json")
	writeMode(t, foreign, content, 0o600)
	canChown = os.Chown(foreign, 4242, 4242) == nil
	in := func(p ...string) string { return filepath.Join(append([]string{dir}, p...)...) }
	return []hostilePath{
		{"symlink as the file", in("link.json"), api.CodeManifestPathSymlink, false},
		{"relative in-tree symlink as the file", in("rel-link.json"), api.CodeManifestPathSymlink, false},
		{"symlink in a parent directory", in("alias", "m.json"), api.CodeManifestPathSymlink, false},
		{"symlink erased by ..", in("alias") + "/../m.json", api.CodeManifestPathSymlink, false},
		{"self symlink in the path", in("self", "self", "m.json"), api.CodeManifestPathSymlink, false},
		{"trailing slash", in("m.json") + "/", api.CodeManifestPathInvalid, false},
		{"trailing slash on a symlink", in("link.json") + "/", api.CodeManifestPathInvalid, false},
		{"final ..", in("real") + "/..", api.CodeManifestPathInvalid, false},
		{"NUL byte", in("m.json") + "\x00.txt", api.CodeManifestPathInvalid, false},
		{"FIFO", in("fifo.json"), api.CodeManifestNotRegular, false},
		{"character device", "/dev/null", api.CodeManifestNotRegular, false},
		{"directory", in("real"), api.CodeManifestNotRegular, false},
		{"sparse file of 1 TiB", sparse, api.CodeManifestTooLarge, false},
		{"1 MiB + 1 byte", in("big.json"), api.CodeManifestTooLarge, false},
		{"group-writable file", in("group-writable.json"), api.CodeManifestPermissions, false},
		{"world-writable file", in("world-writable.json"), api.CodeManifestPermissions, false},
		{"world-writable directory without sticky bit", in("open", "m.json"), api.CodeManifestPermissions, false},
		{"owned by another user", foreign, api.CodeManifestOwner, true},
		{"missing", in("nope.json"), api.CodeManifestNotFound, false},
	}, canChown
}

// checkHostileManifestPath: train refuses tc's path with its code (exit 4,
// promptly, no file contents echoed); sign refuses it (exit 4, bad input) and writes
// no signature.
func checkHostileManifestPath(t *testing.T, sink *admissionSink, dir string, tc hostilePath) {
	t.Helper()
	done := make(chan cliResult, 1)
	go func() { done <- sink.train(t, dir, tc.path, "k-path") }()
	var res cliResult
	select {
	case res = <-done:
	case <-time.After(patience.Wait):
		t.Fatal("itogate train hung on the path")
	}
	if res.exit != exitFailed || !strings.Contains(res.stderr, string(tc.code)) {
		t.Fatalf("train: exit %d, stderr %q; want exit %d and %s", res.exit, res.stderr, exitFailed, tc.code)
	}
	if strings.Contains(res.stderr, `"schema"`) || strings.Contains(res.stderr, "llama") {
		t.Fatalf("stderr echoes file contents: %q", res.stderr)
	}
	sigOut := filepath.Join(t.TempDir(), "out.sig")
	res = runCLI(t, "sign", "--key", filepath.Join("..", "..", "fixtures", "keys", "dev-manifest-ecdsa.key.pem"),
		"--output-signature", sigOut, tc.path)
	if res.exit != exitFailed || !strings.Contains(res.stderr, string(tc.code)) {
		t.Fatalf("sign: exit %d, stderr %q; want exit %d and %s", res.exit, res.stderr, exitFailed, tc.code)
	}
	if _, err := os.Stat(sigOut); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("sign wrote a signature for a refused path: %v", err)
	}
}

// TestCLIManifestSwapRace: while `itogate train` and `itogate sign` run, the
// manifest path flips between a regular file (A) and a symlink to another
// file (B) by atomic renames. Every run either refuses with
// MANIFEST_PATH_SYMLINK or sends/signs exactly A's bytes with A's digest —
// never B's.
func TestCLIManifestSwapRace(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"))
	if err != nil {
		t.Fatal(err)
	}
	b := bytes.Replace(a, []byte(`"nodes": 8`), []byte(`"nodes": 9`), 1)
	if bytes.Equal(a, b) {
		t.Fatal("fixture changed")
	}
	srcA, srcB, path := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json"), filepath.Join(dir, "m.json")
	writeMode(t, srcA, a, 0o600)
	writeMode(t, srcB, b, 0o600)
	if err := os.Link(srcA, path); err != nil {
		t.Fatal(err)
	}
	swaps := swapManifest(t, dir, srcA, path)

	sink := newSink(t)
	sigOut := filepath.Join(dir, "out.sig")
	pub := keys.Dev().ManifestECDSA.Public.(*ecdsa.PublicKey)
	var sent, signed, refused int
	deadline := time.Now().Add(patience.Wait)
	for i := 0; time.Now().Before(deadline) && (i < 60 || sent == 0 || signed == 0 || refused == 0); i++ {
		key := "k-race-" + hex.EncodeToString([]byte{byte(i >> 8), byte(i)})
		if raceTrain(t, sink, dir, path, key, a, b) {
			sent++
		} else {
			refused++
		}
		if raceSign(t, path, sigOut, a, pub) {
			signed++
		} else {
			refused++
		}
	}
	t.Logf("%d swaps; %d sends and %d signatures of A, %d refusals, none of B", swaps.Load(), sent, signed, refused)
	if sent == 0 || refused == 0 {
		t.Fatalf("the race was not exercised: %d sends, %d refusals", sent, refused)
	}
}

// swapManifest flips path between a hard link to srcA and a symlink to
// b.json (both by atomic renames) until the test ends, and counts the swaps.
func swapManifest(t *testing.T, dir, srcA, path string) *atomic.Int64 {
	stop := make(chan struct{})
	swapped := make(chan struct{})
	var swaps atomic.Int64
	go func() {
		defer close(swapped)
		tmpA, tmpL := filepath.Join(dir, ".a.tmp"), filepath.Join(dir, ".l.tmp")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = os.Remove(tmpA)
			_ = os.Remove(tmpL)
			var err error
			if i%2 == 0 {
				if err = os.Symlink("b.json", tmpL); err == nil {
					err = os.Rename(tmpL, path)
				}
			} else if err = os.Link(srcA, tmpA); err == nil {
				err = os.Rename(tmpA, path)
			}
			if err != nil {
				panic(err)
			}
			swaps.Add(1)
		}
	}()
	t.Cleanup(func() { close(stop); <-swapped })
	return &swaps
}

// raceTrain runs `itogate train` on the swapping path: true when it sent
// exactly A with A's digest, false when it refused the symlink; anything
// else (B sent, another failure) fails the test.
func raceTrain(t *testing.T, sink *admissionSink, dir, path, key string, a, b []byte) bool {
	t.Helper()
	res := sink.train(t, dir, path, key)
	switch {
	case res.exit == exitFailed && strings.Contains(res.stderr, string(api.CodeManifestPathSymlink)):
		return false
	case res.exit == 0:
		got, ok := sink.manifest(key)
		if !ok || !bytes.Equal(got, a) || !strings.Contains(res.stderr, sha(a)) {
			t.Fatalf("train sent %d bytes (B: %v) with stderr %q", len(got), bytes.Equal(got, b), res.stderr)
		}
		return true
	}
	t.Fatalf("train: exit %d, stderr %q", res.exit, res.stderr)
	return false
}

// raceSign runs `itogate sign` on the swapping path: true when it signed
// exactly A (verified with pub), false when it refused the symlink; anything else fails the
// test.
func raceSign(t *testing.T, path, sigOut string, a []byte, pub *ecdsa.PublicKey) bool {
	t.Helper()
	_ = os.Remove(sigOut)
	res := runCLI(t, "sign", "--key", filepath.Join("..", "..", "fixtures", "keys", "dev-manifest-ecdsa.key.pem"),
		"--output-signature", sigOut, path)
	switch {
	case res.exit == exitFailed && strings.Contains(res.stderr, string(api.CodeManifestPathSymlink)):
		return false
	case res.exit == 0:
		sig, err := os.ReadFile(sigOut)
		if err != nil {
			t.Fatal(err)
		}
		der, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(sig)))
		sumA := sha256.Sum256(a)
		if err != nil || !ecdsa.VerifyASN1(pub, sumA[:], der) || !strings.Contains(res.stdout, sha(a)) {
			t.Fatalf("sign signed something other than A: %q", res.stdout)
		}
		return true
	}
	t.Fatalf("sign: exit %d, stderr %q", res.exit, res.stderr)
	return false
}
