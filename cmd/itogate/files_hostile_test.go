//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/internal/patience"
)

// TestCLISignNeverWritesThroughALink: a symlink planted at sign's output
// path is replaced by the signature file; the file it pointed to is left
// exactly as it was.
func TestCLISignNeverWritesThroughALink(t *testing.T) {
	dir := t.TempDir()
	manifestPath := filepath.Join(dir, "m.json")
	writeMode(t, manifestPath, mustRead(t, filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json")), 0o600)
	victim := filepath.Join(dir, "victim.txt")
	writeMode(t, victim, []byte("precious\n"), 0o600)
	out := filepath.Join(dir, "out.sig")
	if err := os.Symlink(victim, out); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join("..", "..", "fixtures", "keys", "dev-manifest-ecdsa.key.pem")
	res := runCLI(t, "sign", "--key", keyFile, "--output-signature", out, manifestPath)
	if res.exit != 0 {
		t.Fatalf("sign: exit %d, %q", res.exit, res.stderr)
	}
	if got := string(mustRead(t, victim)); got != "precious\n" {
		t.Fatalf("the link's target was overwritten: %q", got)
	}
	fi, err := os.Lstat(out)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Fatalf("output %v, %v; want a regular 0644 file", fi.Mode(), err)
	}
	if sig := strings.TrimSpace(string(mustRead(t, out))); len(sig) < 80 {
		t.Fatalf("signature %q", sig)
	}
	// Nothing else is left in the directory (no temp file).
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Fatalf("directory holds %d entries, want manifest, victim, signature", len(entries))
	}
}

// TestCLIFilesAreReadSafely: every other file train and status read — the
// signature, the caller token, the entitlement — goes through the safe
// reader: a FIFO is refused at once (it blocked forever, beyond --timeout),
// a symlink is refused, not followed. Nothing is sent.
func TestCLIFilesAreReadSafely(t *testing.T) {
	sink := newSink(t)
	dir := t.TempDir()
	manifestPath := filepath.Join(dir, "m.json")
	writeMode(t, manifestPath, mustRead(t, filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json")), 0o600)
	tok, ent, sig := clientFiles(t, dir)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(tok, link); err != nil {
		t.Fatal(err)
	}
	train := func(tokFile, entFile, sigFile string) cliResult {
		return runCLI(t, "train", "--server", sink.srv.URL, "--token-file", tokFile, "--entitlement-file", entFile,
			"--booking", "bk_demo_01", "--manifest", manifestPath, "--signature", sigFile, "--confirmation-ref",
			"cfr_"+strings.Repeat("0", 32), "--idempotency-key", "k-files", "--timeout", "10s")
	}
	for _, tc := range []struct {
		name string
		run  func() cliResult
		code api.Code
	}{
		{"signature is a FIFO", func() cliResult { return train(tok, ent, fifo) }, api.CodeManifestNotRegular},
		{"token file is a FIFO", func() cliResult { return train(fifo, ent, sig) }, api.CodeManifestNotRegular},
		{"entitlement file is a FIFO", func() cliResult { return train(tok, fifo, sig) }, api.CodeManifestNotRegular},
		{"signature is a symlink", func() cliResult { return train(tok, ent, link) }, api.CodeManifestPathSymlink},
		{"token file is a symlink", func() cliResult { return train(link, ent, sig) }, api.CodeManifestPathSymlink},
		{"status token file is a FIFO", func() cliResult {
			return runCLI(t, "status", "--server", sink.srv.URL, "--token-file", fifo, "--idempotency-key", "k-files")
		}, api.CodeManifestNotRegular},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan cliResult, 1)
			go func() { done <- tc.run() }()
			var res cliResult
			select {
			case res = <-done:
			case <-time.After(patience.Wait):
				t.Fatal("the CLI blocked on the file")
			}
			if res.exit != exitFailed || !strings.Contains(res.stderr, string(tc.code)) {
				t.Fatalf("exit %d, stderr %q; want %d and %s", res.exit, res.stderr, exitFailed, tc.code)
			}
		})
	}
	if n := sink.hits.Load(); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

// TestPlanEntitlementFileIsReadSafely: `itogate plan --entitlement` reads
// its claims file through the safe reader, as eval does: a FIFO (refused
// at once, never opened), a directory, a file over the 64 KiB bound, a
// group-writable file, a missing one and, when not run as root, one the
// user may not read are each refused with the safe reader's code, exit 4,
// before any plan is searched (nothing on stdout).
func TestPlanEntitlementFileIsReadSafely(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	in := func(name string) string { return filepath.Join(dir, name) }
	if err := syscall.Mkfifo(in("fifo.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeMode(t, in("big.json"), []byte(`{"x":"`+strings.Repeat("a", 64<<10)+`"}`), 0o600)
	writeMode(t, in("group-writable.json"), []byte("{}"), 0o620)
	cases := []struct {
		name, path string
		code       api.Code
	}{
		{"FIFO", in("fifo.json"), api.CodeManifestNotRegular},
		{"directory", dir, api.CodeManifestNotRegular},
		{"over 64 KiB", in("big.json"), api.CodeManifestTooLarge},
		{"group-writable", in("group-writable.json"), api.CodeManifestPermissions},
		{"missing", in("missing.json"), api.CodeManifestNotFound},
	}
	if os.Geteuid() != 0 { // root reads a mode 000 file
		writeMode(t, in("unreadable.json"), []byte("{}"), 0o000)
		cases = append(cases, struct {
			name, path string
			code       api.Code
		}{"mode 000", in("unreadable.json"), api.CodeManifestUnreadable})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := runBounded(t, []string{"plan", "--manifest", filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"),
				"--entitlement", tc.path})
			if res.exit != exitFailed || !strings.Contains(res.stderr, string(tc.code)) || res.stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d naming %s, nothing on stdout",
					res.exit, res.stdout, res.stderr, exitFailed, tc.code)
			}
		})
	}
}
