//go:build unix

package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/runtime"
	"github.com/itocompute/itogate/gatekeeper/runtime/runtimetest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
)

// benchServer is newHarness for benchmarks: the service started through the
// runtime as `itogate serve` runs it (a real bbolt ledger with fsync on, the
// decision log in its file, tickets signed on every allow), with the server
// log discarded and no bound on concurrent evaluations (the benchmark
// checks every status; shedding has its own tests). Deposits go through an
// HTTP server; the timed admissions call ServeHTTP directly so a CPU
// profile holds the server's work and not an HTTP client's.
type benchServer struct {
	h      http.Handler
	runner *scenario.Runner
	caller string
}

func newBenchServer(b *testing.B) *benchServer {
	b.Helper()
	rt := runtimetest.Open(b, runtimetest.Config(b), runtime.Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	srv := runtimetest.Serve(b, rt, rt.Handler())
	r, err := scenario.New(srv.URL, fixtures.Manifests())
	if err != nil {
		b.Fatal(err)
	}
	caller, err := scenario.CallerToken()
	if err != nil {
		b.Fatal(err)
	}
	return &benchServer{h: rt.Handler(), runner: r, caller: caller}
}

// deposit deposits n confirmations for m (16 at a time) and returns their refs.
func (s *benchServer) deposit(b *testing.B, m scenario.Manifest, n int) chan string {
	b.Helper()
	budget, _ := m.Doc["budget"].(map[string]any)
	cost, _ := budget["ceiling_usd"].(string)
	digest := manifest.Digest(m.Raw)
	refs := make(chan string, n)
	var wg sync.WaitGroup
	var left atomic.Int64
	left.Store(int64(n))
	var failed atomic.Value
	for range min(16, n) {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				ref, err := s.runner.Confirm(context.Background(), "train.create", digest, cost, "")
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				refs <- ref
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	close(refs)
	return refs
}

// benchAdmit posts train.create admissions for the fixture name from 8×GOMAXPROCS
// goroutines (16 on two cores, as the load test's closed loop) and checks
// every status. allow: one fresh confirmation per request (durable bbolt
// commit); deny: the V100 FSDP manifest, denied by the parallelism gate after
// every verification, with one shared confirmation (nothing is written).
func benchAdmit(b *testing.B, name string, want int) {
	s := newBenchServer(b)
	m, err := s.runner.LoadManifest(name)
	if err != nil {
		b.Fatal(err)
	}
	n := 1
	if want == http.StatusOK {
		n = b.N
	}
	// every allowed run stays live: book room for all of them
	ent, err := s.runner.EntitlementForRuns(m, "", int64(n))
	if err != nil {
		b.Fatal(err)
	}
	refs := s.deposit(b, m, n)
	shared := ""
	if want != http.StatusOK {
		shared = <-refs
	}
	mb64 := base64.StdEncoding.EncodeToString(m.Raw)
	var seq atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8)
	cpu0 := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ref := shared
			if ref == "" {
				ref = <-refs
			}
			body, _ := json.Marshal(map[string]any{
				"action": "train.create", "booking_id": scenario.Booking,
				"idempotency_key": fmt.Sprintf("bench-%d", seq.Add(1)),
				"manifest":        mb64, "manifest_signature": m.Signature,
				"entitlement_token": ent, "confirmation_ref": ref,
			})
			req := httptest.NewRequest(http.MethodPost, "/v1/admissions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+s.caller)
			rec := httptest.NewRecorder()
			s.h.ServeHTTP(rec, req)
			if rec.Code != want {
				b.Errorf("HTTP %d, want %d: %.300s", rec.Code, want, rec.Body.String())
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is this process's user+system CPU time in nanoseconds: per-op
// CPU that other processes on a shared machine do not inflate (ns/op does).
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkAdmitAllow is a whole admitted train.create through the real
// router: decode, four verifications, schema, policy, durable commit.
// Profile it with -benchtime=Nx (N confirmations are deposited first).
func BenchmarkAdmitAllow(b *testing.B) { benchAdmit(b, "llama3-8b", http.StatusOK) }

// BenchmarkAdmitDeny is a whole parallelism-denied train.create: the same
// pipeline without the commit, with a deny that computes a fix.
func BenchmarkAdmitDeny(b *testing.B) { benchAdmit(b, "llama2-70b-v100-fsdp", http.StatusForbidden) }
