package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
	"time"
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

// TestServeDevelopmentMode runs the real serve wiring on embedded defaults,
// waits for /readyz and drives the demo through it.
func TestServeDevelopmentMode(t *testing.T) {
	// startServe gives the policy a deadline no machine can hit: this test
	// checks the wiring under -race on a busy two-core machine, not latency.
	url, logs := startServe(t, &serveOptions{}, true)
	var out bytes.Buffer
	if err := runDemo(context.Background(), &out, url); err != nil {
		t.Errorf("demo: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), " 0 failed") {
		t.Errorf("demo table:\n%s", out.String())
	}
	if !strings.Contains(logs.String(), "DEVELOPMENT MODE") {
		t.Fatalf("no loud development-mode line in %s", logs.String())
	}
}

func TestServeDevelopmentRefusesNonLoopback(t *testing.T) {
	err := runServe(context.Background(), &serveOptions{listen: "0.0.0.0:0", dataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "loopback only") {
		t.Fatalf("runServe = %v", err)
	}
}

func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	debug.SetGCPercent(100)
	if got := tuneGC(func(string) string { return "" }); got != defaultGCPercent || debug.SetGCPercent(100) != defaultGCPercent {
		t.Fatalf("without GOGC: %d, want %d in force", got, defaultGCPercent)
	}
	debug.SetGCPercent(50) // as the runtime would have applied GOGC=50
	if got := tuneGC(func(k string) string { return map[string]string{"GOGC": "50"}[k] }); got != 50 || debug.SetGCPercent(50) != 50 {
		t.Fatalf("with GOGC=50: %d, want the operator's 50 left in force", got)
	}
}

// TestServeDevelopmentQueueWait: --max-queue-wait reaches the evaluation
// bound serve enforces (its start-up line reports the effective bound).
func TestServeDevelopmentQueueWait(t *testing.T) {
	_, logs := startServe(t, &serveOptions{maxEvaluations: 1, maxQueueWait: 7 * time.Minute}, true)
	for _, want := range []string{`"evaluation_slots":1`, `"evaluation_queue":64`, `"evaluation_queue_wait":"7m0s"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("start-up log lacks %s:\n%s", want, logs.String())
		}
	}
}

func TestServeDevelopmentRefusesNegativeQueueWait(t *testing.T) {
	err := runServe(context.Background(), &serveOptions{listen: "127.0.0.1:0", dataDir: t.TempDir(), maxQueueWait: -time.Second},
		slog.New(slog.DiscardHandler))
	if err == nil || err.Error() != "limits.max_concurrent_evaluations must be -1 (no bound), 0 (one per CPU) or positive; "+
		"limits.max_queued_evaluations and limits.max_queue_wait must not be negative" {
		t.Fatalf("runServe with --max-queue-wait -1s = %v", err)
	}
}

func TestServeDevelopmentRefusesBadEvaluationBound(t *testing.T) {
	err := runServe(context.Background(), &serveOptions{listen: "127.0.0.1:0", dataDir: t.TempDir(), maxEvaluations: -5},
		slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "limits.max_concurrent_evaluations must be -1") {
		t.Fatalf("runServe with --max-concurrent-evaluations -5 = %v", err)
	}
}

// TestServeDevFlagsAreSetAliases: each development flag is exactly the
// --set assignment(s) its help names, and gives the same configuration.
func TestServeDevFlagsAreSetAliases(t *testing.T) {
	o := &serveOptions{listen: "127.0.0.1:9443", dataDir: "d", ledgerDSN: "postgres://db/x?sslmode=disable", ledgerSchema: "s",
		ledgerTimeout: 2 * time.Second, policyDeadline: time.Second, requestTimeout: 3 * time.Second, maxEvaluations: -1,
		maxQueueWait: 40 * time.Millisecond, shadowFile: "c.tar.gz", bundleFile: "b.tar.gz", bundlePoll: time.Minute,
		bundleMaxAge: time.Hour, webhookListen: "127.0.0.1:9444", webhookCert: "tls.crt", webhookKey: "tls.key",
		webhookClientCA: "ca.pem", webhookNamespaces: []string{"team-a=acct_a", "team-b=acct_b"}}
	as, err := o.devAssignments()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range as {
		got = append(got, "--"+a.flag+" → "+a.key+"="+a.value)
	}
	want := []string{
		`--listen → listen="127.0.0.1:9443"`, `--data-dir → data_dir="d"`,
		`--ledger-dsn → ledger.driver=postgres`, `--ledger-dsn → ledger.dsn="postgres://db/x?sslmode=disable"`,
		`--ledger-schema → ledger.schema="s"`,
		`--ledger-timeout → ledger.statement_timeout=2s`, `--ledger-timeout → ledger.acquire_timeout=2s`,
		`--policy-deadline → policy.deadline=1s`, `--request-timeout → limits.request_timeout=3s`,
		`--max-concurrent-evaluations → limits.max_concurrent_evaluations=-1`, `--max-queue-wait → limits.max_queue_wait=40ms`,
		`--shadow-bundle-file → policy.shadow.file="c.tar.gz"`, `--bundle-file → policy.bundle.file="b.tar.gz"`,
		`--bundle-poll-interval → policy.bundle.poll_interval=1m0s`, `--bundle-max-age → policy.bundle.max_age=1h0m0s`,
		`--webhook-listen → webhook.listen="127.0.0.1:9444"`, `--webhook-cert-file → webhook.cert_file="tls.crt"`,
		`--webhook-key-file → webhook.key_file="tls.key"`, `--webhook-client-ca-file → webhook.client_ca_file="ca.pem"`,
		`--webhook-namespace → webhook.namespaces.team-a="acct_a"`, `--webhook-namespace → webhook.namespaces.team-b="acct_b"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("assignments:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	viaFlags, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	viaSet, err := (&serveOptions{sets: []string{"listen=127.0.0.1:9443", "data_dir=d", "ledger.driver=postgres",
		"ledger.dsn=postgres://db/x?sslmode=disable", "ledger.schema=s", "ledger.statement_timeout=2s", "ledger.acquire_timeout=2s",
		"policy.deadline=1s", "limits.request_timeout=3s", "limits.max_concurrent_evaluations=-1", "limits.max_queue_wait=40ms",
		"policy.shadow.file=c.tar.gz", "policy.bundle.file=b.tar.gz", "policy.bundle.poll_interval=1m", "policy.bundle.max_age=1h",
		"webhook.listen=127.0.0.1:9444", "webhook.cert_file=tls.crt", "webhook.key_file=tls.key", "webhook.client_ca_file=ca.pem",
		"webhook.namespaces.team-a=acct_a", "webhook.namespaces.team-b=acct_b"}}).config()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(viaFlags, viaSet) {
		t.Fatalf("the flags and their --set differ:\n%+v\n%+v", viaFlags, viaSet)
	}
}

// TestServeFlagErrors: through the command line, a misspelt --set key, a
// development flag beside --config and a malformed --webhook-namespace are
// refused before anything opens, each with its message.
func TestServeFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "limits.request_timout=10s"},
			"--set limits.request_timout=10s: field request_timout not found in type config.Limits"},
		{[]string{"--request-timeout", "-1s"}, "limits.request_timeout must not be negative"},
		{[]string{"--set", "policy.bundle.poll_interval=5s"},
			"policy.bundle: file or url is required (omit the bundle section for the embedded bundle)"},
		{[]string{"--config", "itogate.yaml", "--listen", "127.0.0.1:1", "--ledger-timeout", "1s"},
			"--listen, --data-dir, --ledger-timeout: development-mode flags; with --config set listen, data_dir, " +
				"ledger.statement_timeout, ledger.acquire_timeout in the file (or with --set)"},
		{[]string{"--webhook-namespace", "team-a"}, `--webhook-namespace "team-a": want NAMESPACE=ACCOUNT`},
		{[]string{"--set", "trust.callers.issuer=https://idp.example"},
			"trust: development mode trusts the published development keys (fixtures/keys) only; configure trust in a --config file"},
	} {
		root := newRootCmd(&bytes.Buffer{}, &bytes.Buffer{})
		root.SetArgs(append([]string{"serve", "--data-dir", t.TempDir()}, tc.args...))
		if err := root.Execute(); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v\nwant %s", tc.args, err, tc.want)
		}
	}
}
