package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/ledger/postgres/pgtest"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/internal/syncbuf"
)

// TestProductionExample follows README.md's "Run it for real" with the
// binary: keygen for every purpose, `make bundle` signed with the bundle key,
// `itogate serve --config examples/production/itogate.yaml` on PostgreSQL,
// tokens minted with those keys (token --key/--kid), the manifest signed,
// the confirmation deposited, `itogate train` admitted and the run cancelled
// — twice, as a reader running the walkthrough again would. No development
// key is anywhere: the configuration names only the keys made here, and
// --config refuses the published ones.
//
// The configuration is used as it is, except for four lines a test must
// change: a free port, the test server's DSN, a schema of its own, and
// deadlines no loaded machine reaches (no test depends on speed).
func TestProductionExample(t *testing.T) {
	dsn := pgtest.DSN(t) // skips, saying how to run it, without ITOGATE_TEST_POSTGRES_DSN
	schema := pgtest.Schema(t, dsn)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "itogate")
	run(t, root, nil, "go", "build", "-o", bin, "./cmd/itogate")

	raw, err := os.ReadFile("production/itogate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	cfg := string(raw)
	for _, r := range []struct{ line, with string }{
		{"listen: 127.0.0.1:8443", "listen: 127.0.0.1:" + port},
		{"dsn: postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "dsn: '" + dsn + "'"},
		{"schema: itogate_example", "schema: " + schema},
		{"deadline: 250ms", "deadline: " + patience.Deadline.String()},
		{"request_timeout: 5s", "request_timeout: " + patience.Deadline.String()},
	} {
		cfg = replaceOnce(t, cfg, r.line, r.with)
	}
	conf := filepath.Join(dir, "prod", "itogate.yaml")
	if err := os.MkdirAll(filepath.Dir(conf), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(dir, "prod", "keys")
	for _, purpose := range []string{"caller", "depositor", "entitlement", "confirmation", "manifest", "bundle"} {
		run(t, dir, nil, bin, "keygen", "--name", purpose, "--dir", keys)
	}
	out := run(t, root, nil, "make", "--no-print-directory", "bundle",
		"BUNDLE_OUT="+filepath.Join(dir, "prod", "bundle.tar.gz"),
		"BUNDLE_SIGNING_KEY="+filepath.Join(keys, "bundle.key.pem"), "BUNDLE_KEY_ID=bundle-1",
		"BUNDLE_VERIFICATION_KEY="+filepath.Join(keys, "bundle.pub.pem"), "BUNDLE_SIGNING_ALG=ES256")
	m := regexp.MustCompile(`(?m)^revision\s+(\S+)$`).FindStringSubmatch(out)
	if m == nil || strings.Contains(out, "DEVELOPMENT") {
		t.Fatalf("make bundle output:\n%s", out)
	}
	revision := m[1]

	// Started from another directory: relative paths in the file resolve
	// against the file's directory.
	logs := &syncbuf.Buffer{}
	serve := exec.Command(bin, "serve", "--config", conf)
	serve.Dir = t.TempDir()
	serve.Stdout, serve.Stderr = logs, logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	t.Cleanup(func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		<-exited
		if t.Failed() {
			t.Logf("itogate serve output:\n%s", logs.String())
		}
	})
	url := "http://127.0.0.1:" + port
	patience.Until(t, "itogate serve --config ready", func() bool {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("itogate serve exited: %v\n%s", err, logs.String())
		default:
		}
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	work := filepath.Join(dir, "prod")
	manifest := filepath.Join(work, "manifest.json")
	mraw, err := os.ReadFile(filepath.Join(root, "fixtures", "manifests", "llama3-8b.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifest, mraw, 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(manifest, 0o644) // whatever the umask
	env := []string{"ITOGATE_URL=" + url}
	mint := func(args ...string) string {
		return strings.TrimSpace(run(t, work, env, bin, append([]string{"token"}, args...)...))
	}
	env = append(env,
		"ITOGATE_TOKEN="+mint("caller", "--key", "keys/caller.key.pem", "--kid", "caller-1",
			"--issuer", "https://idp.example.com", "--audience", "itogate", "--account", "acct_42"),
		"ITOGATE_DEPOSITOR_TOKEN="+mint("depositor", "--key", "keys/depositor.key.pem", "--kid", "depositor-1",
			"--issuer", "https://desk.example.com", "--audience", "itogate-deposit", "--subject", "desk"))
	run(t, work, env, bin, "sign", "--key", "keys/manifest.key.pem", "manifest.json")
	// The walkthrough twice: the first run's admission, cancelled at its
	// end, leaves the booking free, and the second run's key is its own.
	for _, key := range []string{"run-20260101T000000", "run-20260101T000100"} {
		admitAndCancel(t, work, bin, env, mint, key, revision)
	}
	if l := logs.String(); strings.Contains(l, "DEVELOPMENT") || !strings.Contains(l, `"development":false`) {
		t.Fatalf("itogate serve --config mentions development keys or mode:\n%s", l)
	}
	if _, err := os.Stat(filepath.Join(work, "data", "decisions.jsonl")); err != nil {
		t.Fatalf("decision log not where the relative data_dir says: %v", err)
	}
}

// admitAndCancel runs the walkthrough's admission under key — the
// entitlement and the confirmation minted, the confirmation deposited,
// train, status — and its clean-up: the run cancelled under a confirmation
// minted without --manifest or --cost.
func admitAndCancel(t *testing.T, work, bin string, env []string, mint func(...string) string, key, revision string) {
	t.Helper()
	env = append(env, "ITOGATE_ENTITLEMENT="+mint("entitlement", "--key", "keys/entitlement.key.pem",
		"--kid", "entitlement-1", "--issuer", "https://backend.example.com", "--audience", "itogate",
		"--account", "acct_42", "--booking", "bk_42", "--manifest", "manifest.json"))
	confirm := func(args ...string) string {
		ref := mint(append([]string{"confirmation", "--key", "keys/confirmation.key.pem", "--kid", "confirmation-1",
			"--issuer", "https://desk.example.com", "--audience", "itogate",
			"--account", "acct_42", "--booking", "bk_42", "--deposit"}, args...)...)
		if !strings.HasPrefix(ref, "cfr_") {
			t.Fatalf("deposit printed %q, want a cfr_ reference", ref)
		}
		return ref
	}
	ref := confirm("--manifest", "manifest.json")
	out := run(t, work, env, bin, "train", "--booking", "bk_42", "--manifest", "manifest.json",
		"--confirmation-ref", ref, "--idempotency-key", key, "--json", "--timeout", patience.Deadline.String())
	var envelope struct {
		OK   bool `json:"ok"`
		Data struct {
			Decision       string `json:"decision"`
			State          string `json:"state"`
			BookingID      string `json:"booking_id"`
			RunID          string `json:"run_id"`
			BundleRevision string `json:"bundle_revision"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &envelope); err != nil {
		t.Fatalf("train --json printed %q: %v", out, err)
	}
	d := envelope.Data
	if !envelope.OK || d.Decision != "allow" || d.State != "admitted" || d.BookingID != "bk_42" ||
		!strings.HasPrefix(d.RunID, "run_") || d.BundleRevision != revision {
		t.Fatalf("train %s: %s\nwant an allow of bk_42 under bundle revision %s", key, out, revision)
	}
	status := run(t, work, env, bin, "status", "--idempotency-key", key)
	m := regexp.MustCompile(`run_id=(\S+)`).FindStringSubmatch(status)
	if m == nil || m[1] != d.RunID {
		t.Fatalf("status: %s\nwant run %s", status, d.RunID)
	}
	cancelRef := confirm("--act", "train.cancel", "--run-id", m[1])
	out = run(t, work, env, bin, "train", "--action", "train.cancel", "--booking", "bk_42", "--run-id", m[1],
		"--confirmation-ref", cancelRef, "--idempotency-key", "cancel-"+key, "--timeout", patience.Deadline.String())
	if !strings.Contains(out, "ALLOW  train.cancel  run_id="+m[1]+"  state=cancel_admitted") {
		t.Fatalf("cancel: %s", out)
	}
}

// run runs a command in dir and returns its standard output; it fails the
// test with both streams when the command fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience.Deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("examples/production/itogate.yaml holds %q %d times, want once", old, n)
	}
	return strings.Replace(s, old, new, 1)
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}
