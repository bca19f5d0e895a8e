package runtime_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/ledger/bolt"
	"github.com/itocompute/itogate/gatekeeper/runtime"
	"github.com/itocompute/itogate/gatekeeper/runtime/runtimetest"
	"github.com/itocompute/itogate/gatekeeper/version"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/internal/syncbuf"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// writeCert writes a self-signed serving certificate for 127.0.0.1 and its
// key into dir.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "itogate-webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for path, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "PRIVATE KEY", Bytes: kder}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// logLines decodes the JSON service log.
func logLines(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(strings.NewReader(logs))
	for dec.More() {
		var line map[string]any
		if err := dec.Decode(&line); err != nil {
			t.Fatalf("log line: %v\n%s", err, logs)
		}
		out = append(out, line)
	}
	return out
}

// TestRunServesUntilCancelled: Run serves the API and the webhook on their
// own listeners (the webhook over TLS), logs its start-up line with what it
// enforces, and on cancellation logs "shutting down" and returns nil.
func TestRunServesUntilCancelled(t *testing.T) {
	api, hook := freeAddr(t), freeAddr(t)
	certFile, keyFile := writeCert(t, t.TempDir())
	cfg := runtimetest.Config(t, "listen="+api, "webhook.listen="+hook, "webhook.cert_file="+certFile,
		"webhook.key_file="+keyFile, "webhook.namespaces.team-a=acct_demo", "limits.max_concurrent_evaluations=3")
	logs := &syncbuf.Buffer{}
	rt := runtimetest.Open(t, cfg, runtime.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if rt.WebhookHandler() == nil || rt.Handler() == nil || rt.Ledger() == nil || rt.DecisionLog() == nil {
		t.Fatal("a webhook section without a webhook handler, or a part missing")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	patience.Until(t, "API ready", func() bool {
		resp, err := http.Get("http://" + api + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	// /readyz names the build and the ledger schema.
	resp, err := http.Get("http://" + api + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready struct {
		Data map[string]any `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if err != nil || ready.Data["status"] != "ready" || ready.Data["version"] != version.Get().Version ||
		ready.Data["ledger_schema"] != float64(bolt.SchemaVersion()) {
		t.Errorf("/readyz data %v (%v)", ready.Data, err)
	}
	tlsClient := &http.Client{Timeout: patience.Wait, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err = tlsClient.Get("https://" + hook + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Fatalf("webhook /healthz: %d %q", resp.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	var msgs []string
	var listening map[string]any
	for _, l := range logLines(t, logs.String()) {
		msgs = append(msgs, l["msg"].(string))
		if l["msg"] == "itogate listening" {
			listening = l
		}
	}
	if got := strings.Join(msgs, " | "); !strings.HasSuffix(got, "webhook listening (TLS) | DEVELOPMENT MODE: embedded policy bundle "+
		"(unless --bundle-file/--bundle-url), PUBLISHED development keys from fixtures/keys, loopback only. Anyone can mint tokens "+
		"these keys accept. Never use this mode in production; pass --config. | DEVELOPMENT MODE: admission tickets are signed "+
		"with the PUBLISHED development ticket key dev-ticket-1 (fixtures/keys): a ticket from this server proves nothing to a "+
		"workload boundary | DEVELOPMENT MODE: the decision log is best effort: a line that cannot be written is dropped and "+
		"counted (itogate_decision_log_dropped_total), and the allow is committed anyway | itogate listening | shutting down") {
		t.Fatalf("log lines: %s", got)
	}
	for k, want := range map[string]any{"addr": api, "development": true, "evaluation_slots": 3.0, "evaluation_queue": 192.0,
		"evaluation_queue_wait": "1s", "ledger": "bbolt " + filepath.Join(cfg.DataDir, "ledger.db"),
		"decision_log": filepath.Join(cfg.DataDir, "decisions.jsonl"), "decision_log_required": false,
		"version": version.Get().Version, "ledger_schema": float64(bolt.SchemaVersion())} {
		if listening[k] != want {
			t.Errorf("start-up line %s = %v, want %v", k, listening[k], want)
		}
	}
	if rev, _ := listening["bundle_revision"].(string); rev == "" {
		t.Errorf("start-up line without the bundle revision: %v", listening)
	}
}

// TestRunReportsAListenerInUse: Run returns the listener's error.
func TestRunReportsAListenerInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rt := runtimetest.Open(t, runtimetest.Config(t, "listen="+ln.Addr().String()), runtime.Options{})
	if err := rt.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Run on a busy port = %v", err)
	}
}

// TestOpenValidates: Open refuses what config.Validate refuses, with its
// message, and opens nothing.
func TestOpenValidates(t *testing.T) {
	cfg := runtimetest.Config(t, "listen=0.0.0.0:8443")
	rt, err := runtime.Open(t.Context(), cfg, runtime.Options{})
	if rt != nil || err == nil || err.Error() != `listen: development mode listens on loopback only, not "0.0.0.0:8443"` {
		t.Fatalf("Open = %v, %v", rt, err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "ledger.db")); !os.IsNotExist(err) {
		t.Fatalf("a refused configuration opened a ledger: %v", err)
	}
}

// TestOpenFailureClosesWhatItOpened: a decision log that cannot be opened
// fails Open after the ledger opened; the ledger is closed again (bbolt
// holds a file lock: a second Open of the same data directory succeeds).
func TestOpenFailureClosesWhatItOpened(t *testing.T) {
	cfg := runtimetest.Config(t)
	bad := cfg
	bad.DecisionLog = filepath.Join(cfg.DataDir, "missing", "decisions.jsonl")
	if _, err := runtime.Open(t.Context(), bad, runtime.Options{}); err == nil || !strings.Contains(err.Error(), "decision log:") {
		t.Fatalf("Open with an unwritable decision log = %v", err)
	}
	rt := runtimetest.Open(t, cfg, runtime.Options{})
	if err := rt.Ledger().Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestDecisionLogOffAndClose: decision_log off opens none; Close is
// idempotent.
func TestDecisionLogOffAndClose(t *testing.T) {
	rt, err := runtime.Open(t.Context(), runtimetest.Config(t, "decision_log=off"), runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rt.DecisionLog() != nil {
		t.Fatal("decision_log off opened a decision log")
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

// TestBackupLedger: the running server copies its bbolt ledger (which it
// holds locked) into <data_dir>/backups; the copy opens read-only and
// checks consistent; the log names it (the copy's contents:
// bolt.TestBackupRestore).
func TestBackupLedger(t *testing.T) {
	cfg := runtimetest.Config(t)
	logs := &syncbuf.Buffer{}
	rt := runtimetest.Open(t, cfg, runtime.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	path, n, err := rt.BackupLedger(t.Context())
	if err != nil || n == 0 || filepath.Dir(path) != filepath.Join(cfg.DataDir, "backups") {
		t.Fatalf("BackupLedger = %q, %d, %v", path, n, err)
	}
	if !strings.Contains(logs.String(), `"msg":"ledger backup written","path":"`+path+`"`) {
		t.Fatalf("log: %s", logs.String())
	}
	s, err := bolt.Open(path, bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check of the backup: %v", err)
	}
}

// TestBundleFailureSeriesAtStart: every failure reason's series of
// itogate_bundle_activations_total exists at 0 from start-up, so the alert
// of bundles/README.md (increase(...{result="failure"}[15m]) > 0) fires on
// the first failure, not only once a second one follows it.
func TestBundleFailureSeriesAtStart(t *testing.T) {
	rt := runtimetest.Open(t, runtimetest.Config(t), runtime.Options{})
	srv := runtimetest.Serve(t, rt, rt.Handler())
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, r := range bundle.Reasons() {
		want := `itogate_bundle_activations_total{reason="` + string(r) + `",result="failure"} 0`
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestReadyzNamesARestoreHold: a ledger restored from a backup makes the
// service not ready, and /readyz says why (the hold, until when) rather
// than "ledger unreachable".
func TestReadyzNamesARestoreHold(t *testing.T) {
	cfg := runtimetest.Config(t)
	if err := os.MkdirAll(filepath.Dir(cfg.LedgerPath()), 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := bolt.Open(cfg.LedgerPath(), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	backup, _, err := s.BackupFile(t.Context(), t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	f, err := os.Open(backup)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := bolt.Restore(t.Context(), f, backup, cfg.LedgerPath(), time.Hour, 0, time.Now())
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	rt := runtimetest.Open(t, cfg, runtime.Options{})
	srv := runtimetest.Serve(t, rt, rt.Handler())
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	want := "ledger restored from a backup: held until " + rep.HoldUntil.Format(time.RFC3339)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), want) {
		t.Fatalf("/readyz = %d %s; want 503 naming %q", resp.StatusCode, body, want)
	}
}

// TestRunServesTheAPIOverTLS: with a tls section the API listener answers
// HTTPS with that certificate, refuses plain HTTP, and the start-up line
// says tls; an unreadable pair fails Open.
func TestRunServesTheAPIOverTLS(t *testing.T) {
	api := freeAddr(t)
	certFile, keyFile := writeCert(t, t.TempDir())
	logs := &syncbuf.Buffer{}
	rt := runtimetest.Open(t, runtimetest.Config(t, "listen="+api, "tls.cert_file="+certFile, "tls.key_file="+keyFile),
		runtime.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	pemCert, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCert)
	client := &http.Client{Timeout: patience.Wait, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	patience.Until(t, "API ready over TLS", func() bool {
		resp, err := client.Get("https://" + api + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	resp, err := http.Get("http://" + api + "/readyz")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP on the TLS listener: %d, want 400 (Go's answer to HTTP on an HTTPS port)", resp.StatusCode)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	var tlsField any = "missing"
	for _, l := range logLines(t, logs.String()) {
		if l["msg"] == "itogate listening" {
			tlsField = l["tls"]
		}
	}
	if tlsField != true {
		t.Errorf("start-up line tls = %v, want true", tlsField)
	}

	cfg := runtimetest.Config(t, "listen="+freeAddr(t), "tls.cert_file="+keyFile, "tls.key_file="+keyFile)
	if _, err := runtime.Open(t.Context(), cfg, runtime.Options{}); err == nil || !strings.HasPrefix(err.Error(), "tls: ") {
		t.Fatalf("Open with a key as the certificate = %v, want a tls: error", err)
	}
}
