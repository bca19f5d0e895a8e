package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
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
	if err == nil || err.Error() != "--max-queue-wait must not be negative" {
		t.Fatalf("runServe with --max-queue-wait -1s = %v", err)
	}
}

func TestServeDevelopmentRefusesBadEvaluationBound(t *testing.T) {
	err := runServe(context.Background(), &serveOptions{listen: "127.0.0.1:0", dataDir: t.TempDir(), maxEvaluations: -5},
		slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "--max-concurrent-evaluations must be -1") {
		t.Fatalf("runServe with --max-concurrent-evaluations -5 = %v", err)
	}
}
