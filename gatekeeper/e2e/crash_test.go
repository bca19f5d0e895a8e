package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ledger/bolt"
	"github.com/itocompute/itogate/gatekeeper/ledger/postgres"
	"github.com/itocompute/itogate/gatekeeper/ledger/postgres/pgtest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/internal/patience"
)

// Load shape of the crash and fault tests.
const (
	loadWorkers = 8
	crashCycles = 3  // kill/restart cycles per crash test run
	allowsFirst = 25 // allows a cycle waits for before it pulls the plug
)

// attempt is one admission a load worker made and what it heard back.
type attempt struct {
	req    api.AdmissionRequest
	status int    // 0: no answer (transport failure: outcome unknown)
	code   string // error code of a non-200 answer
	runID  string
	decID  string
}

// load drives train.create admissions with scenario helpers (each a fresh
// deposit and a fresh key) from loadWorkers workers until finish, and
// records every attempt whose confirmation was deposited. A failed deposit
// (server gone, ledger down) is retried after a pause.
type load struct {
	mu       sync.Mutex
	attempts []attempt
	allows   atomic.Int64
	answers  atomic.Int64
	wg       sync.WaitGroup
	stop     chan struct{}
}

func startLoad(t *testing.T, base, prefix string) *load {
	t.Helper()
	l := &load{stop: make(chan struct{})}
	for w := range loadWorkers {
		r, err := scenario.New(base, fixtures.Manifests())
		if err != nil {
			t.Fatal(err)
		}
		m, err := r.LoadManifest("llama3-8b")
		if err != nil {
			t.Fatal(err)
		}
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				key := fmt.Sprintf("%s-w%d-%d", prefix, w, i)
				a, req, err := r.Create(context.Background(), m, key)
				if req.ConfirmationRef == "" {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				at := attempt{req: req}
				if err == nil {
					at.status, at.runID, at.decID = a.Status, a.Data.RunID, a.Data.DecisionID
					if a.Error != nil {
						at.code = string(a.Error.Code)
					}
					l.answers.Add(1)
					if a.Status == http.StatusOK {
						l.allows.Add(1)
					}
				}
				l.mu.Lock()
				l.attempts = append(l.attempts, at)
				l.mu.Unlock()
			}
		})
	}
	return l
}

// waitAllows blocks until n allows were received (or fails t after
// patience.Wait).
func (l *load) waitAllows(t *testing.T, n int64) {
	t.Helper()
	patience.Until(t, fmt.Sprintf("%d allows", n), func() bool { return l.allows.Load() >= n })
}

func (l *load) finish() []attempt {
	close(l.stop)
	l.wg.Wait()
	return l.attempts
}

// TestCrashMidLoad builds the itogate binary, serves, drives admissions
// from eight workers, SIGKILLs the process mid-load, restarts it on the same
// ledger and checks, cycle after cycle:
//
//   - every allow a client received is in the ledger: the restarted server
//     answers its key with the same run and decision, and replays it;
//   - a request that got no answer was either committed whole (its key
//     answers) or not at all (its confirmation is still usable);
//   - nothing was consumed twice: each allowed confirmation under a new key
//     is CONFIRMATION_REPLAYED;
//   - the store's own check finds no half-written record.
func TestCrashMidLoad(t *testing.T) {
	t.Run("bbolt", func(t *testing.T) {
		dir := t.TempDir()
		crashCyclesOn(t, func() *proc { return startServe(t, dir) }, func() ledger.Store {
			s, err := bolt.Open(filepath.Join(dir, "ledger.db"), bolt.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
	t.Run("postgres", func(t *testing.T) {
		opts := pgOptions(t)
		flags := []string{"--ledger-dsn", opts.DSN, "--ledger-schema", opts.Schema}
		crashCyclesOn(t, func() *proc { return startServe(t, t.TempDir(), flags...) }, func() ledger.Store {
			s, err := postgres.Open(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}

func crashCyclesOn(t *testing.T, start func() *proc, open func() ledger.Store) {
	var all []attempt
	p := start()
	for cycle := range crashCycles {
		l := startLoad(t, p.url, fmt.Sprintf("crash%d", cycle))
		l.waitAllows(t, allowsFirst)
		p.kill()
		attempts := l.finish()
		p = start()
		unknown, lost := verifyAfterFault(t, p.url, attempts, map[int]bool{http.StatusOK: true})
		t.Logf("cycle %d: %d attempts, %d unanswered at the kill, %d of them not committed (retried fresh)",
			cycle, len(attempts), unknown, lost)
		all = append(all, attempts...)
	}
	p.stop()

	store := open()
	defer store.Close()
	rep := checkLedger(t, store)
	allowed := 0
	for _, at := range all {
		a, err := store.Admission(context.Background(), scenario.Account, at.req.IdempotencyKey)
		switch {
		case at.status == http.StatusOK && (err != nil || a.RunID != at.runID):
			t.Fatalf("allow %s: ledger has %+v, %v", at.req.IdempotencyKey, a, err)
		case err == nil:
			allowed++
		}
	}
	if rep.Admissions != allowed || rep.Consumed != allowed {
		t.Fatalf("ledger: %+v; the clients' keys account for %d admissions", rep, allowed)
	}
	t.Logf("%d cycles, %d attempts, %d admissions, ledger %+v", crashCycles, len(all), allowed, rep)
}

// verifyAfterFault checks, against a live server, what became of attempts
// made while the server or its ledger failed. ok lists the answer statuses
// expected during the fault (true: an allow, false: a deny that must have
// written nothing); anything else fails t.
func verifyAfterFault(t *testing.T, base string, attempts []attempt, ok map[int]bool) (unknown, lost int) {
	t.Helper()
	r, err := scenario.New(base, fixtures.Manifests())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, at := range attempts {
		key := at.req.IdempotencyKey
		st, err := r.Status(ctx, key)
		if err != nil {
			t.Fatalf("status %s: %v", key, err)
		}
		allowed, known := ok[at.status]
		switch {
		case at.status == 0:
			unknown++
		case !known:
			t.Fatalf("%s: answered %d %s during the fault", key, at.status, at.code)
		case allowed:
			if st.Status != http.StatusOK || st.Data.RunID != at.runID || st.Data.DecisionID != at.decID {
				t.Fatalf("%s was allowed (run %s) but the ledger answers %d run %q", key, at.runID, st.Status, st.Data.RunID)
			}
			// The same request again is the stored allow; the same
			// confirmation under another key is spent.
			again, err := r.Admit(ctx, at.req)
			if err != nil || again.Status != http.StatusOK || again.Data.RunID != at.runID || !strings.Contains(again.Notice, "replay") {
				t.Fatalf("%s retried: %+v %v; want the replay of run %s", key, again, err, at.runID)
			}
			other := at.req
			other.IdempotencyKey = key + "-again"
			again, err = r.Admit(ctx, other)
			if err != nil || again.Status != http.StatusForbidden || again.Error == nil || again.Error.Code != "CONFIRMATION_REPLAYED" {
				t.Fatalf("%s's confirmation under a new key: %+v %v; want CONFIRMATION_REPLAYED", key, again, err)
			}
			continue
		}
		// No allow reached the client: either the whole admission is there
		// (committed before the fault hit) or none of it is and the
		// confirmation still admits the request.
		switch st.Status {
		case http.StatusOK:
			if at.status != 0 {
				t.Fatalf("%s was denied %d %s, yet its key holds an admission", key, at.status, at.code)
			}
			continue
		case http.StatusNotFound:
		default:
			t.Fatalf("status %s: %d", key, st.Status)
		}
		lost++
		again, err := r.Admit(ctx, at.req)
		if err != nil || again.Status != http.StatusOK || strings.Contains(again.Notice, "replay") {
			t.Fatalf("%s had no admission, but retrying it gave %+v %v; want a fresh allow", key, again, err)
		}
	}
	return unknown, lost
}

// TestLedgerFailsMidLoad (PostgreSQL): the ledger fails under an itogate
// process serving load — first its backends are terminated mid-transaction
// again and again (pg_terminate_backend), then the network to the database
// is cut, then it stalls. Every failed request answers 503
// LEDGER_UNAVAILABLE, readiness drops, nothing is half-written, every allow
// is in the ledger, and service resumes when the database is back.
func TestLedgerFailsMidLoad(t *testing.T) {
	opts := pgOptions(t)
	proxy, dsn := pgtest.NewProxy(t, opts.DSN)
	dsn, app := pgtest.WithApp(dsn, "itogate_e2e", opts.Schema)
	p := startServe(t, t.TempDir(), "--ledger-dsn", dsn, "--ledger-schema", opts.Schema)
	ledger503 := map[int]bool{http.StatusOK: true, http.StatusServiceUnavailable: false}

	t.Run("backends terminated mid-transaction", func(t *testing.T) {
		l := startLoad(t, p.url, "terminate")
		l.waitAllows(t, 5)
		var terminated atomic.Int64
		killCtx, stopKilling := context.WithCancel(context.Background())
		var killer sync.WaitGroup
		killer.Go(func() {
			for killCtx.Err() == nil {
				// Only this test's itogate: its application_name.
				err := pgtest.Exec(killCtx, opts.DSN,
					"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app)
				if err == nil {
					terminated.Add(1)
				}
				time.Sleep(15 * time.Millisecond)
			}
		})
		deadline := time.Now().Add(time.Minute)
		for failed := 0; failed == 0 || l.answers.Load() < 60; {
			if time.Now().After(deadline) {
				t.Fatalf("no LEDGER_UNAVAILABLE within a minute (%d answers)", l.answers.Load())
			}
			time.Sleep(20 * time.Millisecond)
			l.mu.Lock()
			failed = 0
			for _, at := range l.attempts {
				if at.code == "LEDGER_UNAVAILABLE" {
					failed++
				}
			}
			l.mu.Unlock()
		}
		stopKilling()
		killer.Wait()
		attempts := l.finish()
		codes := map[string]int{}
		for _, at := range attempts {
			codes[fmt.Sprint(at.status, " ", at.code)]++
			if at.status == http.StatusServiceUnavailable && at.code != "LEDGER_UNAVAILABLE" {
				t.Fatalf("%s: 503 %s, want LEDGER_UNAVAILABLE", at.req.IdempotencyKey, at.code)
			}
		}
		waitReady(t, p.url)
		unknown, lost := verifyAfterFault(t, p.url, attempts, ledger503)
		t.Logf("%d terminations; answers %v; %d unanswered; %d denied requests retried fresh", terminated.Load(), codes, unknown, lost)
	})

	t.Run("network cut", func(t *testing.T) {
		a := newActor(t, p.url, scenario.Account, scenario.Booking)
		ent := a.entitlement(t, nil)
		ref := a.confirmation(t, "train.create", nil)
		proxy.Cut()
		a.mustAdmit(t, a.create(ent, ref, "cut-1"), http.StatusServiceUnavailable, "LEDGER_UNAVAILABLE")
		if got := readyz(p.url); got != http.StatusServiceUnavailable {
			t.Fatalf("readyz with the ledger cut off: %d", got)
		}
		if _, err := a.tryConfirmation(context.Background(), "train.create", nil); err == nil || !strings.Contains(err.Error(), "503") {
			t.Fatalf("deposit with the ledger cut off: %v", err)
		}
		proxy.Restore()
		waitReady(t, p.url)
		// The denied request wrote nothing: it passes now.
		a.mustAdmit(t, a.create(a.entitlement(t, nil), ref, "cut-1"), http.StatusOK, "")
	})

	t.Run("network stalled", func(t *testing.T) {
		a := newActor(t, p.url, scenario.Account, scenario.Booking)
		ref := a.confirmation(t, "train.create", nil)
		ent := a.entitlement(t, nil)
		proxy.Stall(true)
		start := time.Now()
		a.mustAdmit(t, a.create(ent, ref, "stall-1"), http.StatusServiceUnavailable, "LEDGER_UNAVAILABLE")
		// The store's own bounds (5s statement timeout + 1s), not the
		// request's (startServe makes it generous), end the wait.
		if d := time.Since(start); d > patience.Wait { // unbounded, it waits for the stall to end
			t.Fatalf("admission on a stalled ledger took %v", d)
		}
		proxy.Stall(false)
		proxy.Cut()
		proxy.Restore()
		waitReady(t, p.url)
		st, err := a.status(context.Background(), "stall-1")
		if err != nil {
			t.Fatal(err)
		}
		if st.Status == http.StatusNotFound {
			a.mustAdmit(t, a.create(a.entitlement(t, nil), ref, "stall-1"), http.StatusOK, "")
		} else if st.Status != http.StatusOK {
			t.Fatalf("status after the stall: %s", st)
		}
	})

	p.stop()
	store, err := postgres.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	t.Logf("ledger %+v", checkLedger(t, store))
}

func waitReady(t *testing.T, base string) {
	t.Helper()
	patience.Until(t, base+" ready again", func() bool { return readyz(base) == http.StatusOK })
}
