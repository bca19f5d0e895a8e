//go:build unix

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// cpuTime is the user+system CPU this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// throughputClients is the number of concurrent callers (issue 4 §6).
const throughputClients = 16

// BenchmarkAdmissions measures allowed train.create admissions per second
// through the real HTTP handler with 16 concurrent clients, each admission
// consuming a confirmation of its own (deposited before the clock starts)
// under a key of its own, on each ledger backend. Every admission does the
// whole pipeline: caller JWT, manifest signature and schema, entitlement and
// confirmation JWTs, the policy, and the ledger commit (fsync on bbolt;
// a READ COMMITTED transaction on PostgreSQL).
//
//	go test -run '^$' -bench Admissions -benchtime 2000x -cpu 2 ./gatekeeper/e2e
//
// Without the race detector; ITOGATE_TEST_POSTGRES_DSN for the PostgreSQL
// half.
//
// Measured 2026-11-29 on the 2-core CI machine type (AMD EPYC, ext4, local
// PostgreSQL 15), 2000 admissions per run. Before the performance work
// (load average 3–6 from other jobs, 3000 admissions):
//
//	backend   allows/s (best, worst)   p50 ms   p99 ms   cpu-ms/allow
//	bbolt     150, 87                  95–146   330–680  7.9–8.7
//	postgres  221, 89                  60–164   150–500  6.5–8.8
//
// After it (one decision+mask evaluation, the cheaper policy, the token
// verification cache; quiet machine, Go's default GOGC here):
//
//	bbolt     285                      52       130      6.7
//	postgres  378                      41       89       4.7
//
// cpu-ms/allow is this process's CPU (server and clients; PostgreSQL's own
// is not included) and is the stable figure; three quarters of the server's
// part is OPA evaluating the policy (docs/performance.md). The ledger is far
// from the limit: bbolt commits ~9,500/s with group commit (BenchmarkCommit
// p=16), PostgreSQL spends one statement per allow.
func BenchmarkAdmissions(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) { benchAdmissions(b, be) })
	}
}

func benchAdmissions(b *testing.B, be backend) {
	base, _ := serve(b, be)

	actors := make([]*actor, throughputClients)
	ents := make([]string, throughputClients)
	for i := range actors {
		actors[i] = newActor(b, base, fmt.Sprintf("acct_load_%02d", i), "bk_load_01")
		ents[i] = actors[i].entitlement(b, nil)
	}
	// One confirmation per admission, deposited up front.
	refs := make([][]string, throughputClients)
	for i := range b.N {
		w := i % throughputClients
		refs[w] = append(refs[w], actors[w].confirmation(b, "train.create", nil))
	}

	var (
		failures atomic.Int64
		mu       sync.Mutex
		lat      []time.Duration
		wg       sync.WaitGroup
	)
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	for w := range throughputClients {
		wg.Go(func() {
			a := actors[w]
			mine := make([]time.Duration, 0, len(refs[w]))
			for j, ref := range refs[w] {
				t0 := time.Now()
				r, err := a.admit(context.Background(), api.AdmissionRequest{
					Action: "train.create", BookingID: a.booking, IdempotencyKey: fmt.Sprintf("load-%d", j),
					Manifest: a.m.Raw, ManifestSignature: a.m.Signature, EntitlementToken: ents[w], ConfirmationRef: ref,
				})
				mine = append(mine, time.Since(t0))
				if err != nil || r.Status != http.StatusOK {
					if failures.Add(1) == 1 {
						b.Errorf("admission: %v %v", r, err)
					}
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "allows/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	// CPU of this process (server and clients; not PostgreSQL's) per
	// allow: the figure to scale by when the machine is shared.
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/allow")
	b.ReportMetric(0, "ns/op")
}
