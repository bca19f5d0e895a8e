package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
)

// TestStatusOutput: `itogate status` against a real server prints one line
// per fact — the stored allow, the manifest digest, booking, key, bundle
// revision and the run's state now, then the server's note — and exits 0; an unknown key prints NOT
// FOUND and exits 3.
func TestStatusOutput(t *testing.T) {
	url, _ := startServe(t, &serveOptions{}, true)
	r, err := scenario.New(url, fixtures.Manifests())
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.LoadManifest("llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	if status, code, _, err := admitLlama(context.Background(), r, m, "status-1"); err != nil || status != 200 {
		t.Fatalf("admission: %d %s %v", status, code, err)
	}
	tok, err := scenario.MintCaller(nil)
	if err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "caller.jwt")
	if err := os.WriteFile(tokFile, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	res := runCLI(t, "status", "--server", url, "--token-file", tokFile, "--idempotency-key", "status-1")
	lines := strings.Split(res.stdout, "\n")
	want := []string{
		"ALLOW  train.create  run_id=run_",
		"  manifest " + manifest.Digest(m.Raw),
		"  booking " + scenario.Booking,
		"  idempotency_key status-1",
		"  bundle_revision ",
		"  run_state live",
		"  note: stored admission",
		"",
	}
	if res.exit != 0 || len(lines) != len(want) {
		t.Fatalf("status: exit %d, stdout %q, stderr %q", res.exit, res.stdout, res.stderr)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) || (w == "" || strings.HasPrefix(w, "  note") || strings.HasPrefix(w, "  manifest") || strings.HasPrefix(w, "  run_state")) && lines[i] != w {
			t.Fatalf("status line %d = %q, want %q\n%s", i+1, lines[i], w, res.stdout)
		}
	}
	res = runCLI(t, "status", "--server", url, "--token-file", tokFile, "--idempotency-key", "status-none")
	if res.exit != exitNotFound || !strings.HasPrefix(res.stdout, "NOT FOUND  ADMISSION_NOT_FOUND: ") || strings.Count(res.stdout, "\n") != 1 {
		t.Fatalf("status of an unknown key: exit %d, stdout %q, stderr %q", res.exit, res.stdout, res.stderr)
	}
	// --json prints the envelope, ending in a line break.
	res = runCLI(t, "status", "--server", url, "--token-file", tokFile, "--idempotency-key", "status-1", "--json")
	if res.exit != 0 || !strings.HasPrefix(res.stdout, "{") || !strings.HasSuffix(res.stdout, "}\n") {
		t.Fatalf("status --json: exit %d, stdout %q", res.exit, res.stdout)
	}
}
