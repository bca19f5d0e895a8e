package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ledger/postgres"
)

// Sizes of the races (issue 4 §3).
const (
	manyKeys      = 200 // admissions presenting one confirmation, each under its own key
	identicalReqs = 50  // identical requests under one key
)

// TestOneConfirmationManyKeys: 200 concurrent admissions present one
// confirmation under 200 idempotency keys, through the real HTTP handler.
// Exactly one is allowed; every other caller gets 403 CONFIRMATION_REPLAYED
// and nothing of theirs is in the ledger.
func TestOneConfirmationManyKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, base string, store ledger.Store) {
		a := newActor(t, base, "acct_race", "bk_race_01")
		ref, winner := raceOneConfirmation(t, []*actor{a}, manyKeys)

		c, err := store.Confirmation(context.Background(), ref)
		if err != nil || c.State != ledger.ConfirmationConsumed || c.ConsumedBy != winner {
			t.Fatalf("confirmation %q by %q, %v; want consumed by %s", c.State, c.ConsumedBy, err, winner)
		}
		for i := range manyKeys {
			if key := raceKey(i); key != winner {
				if _, err := store.Admission(context.Background(), a.account, key); !errors.Is(err, ledger.ErrNotFound) {
					t.Fatalf("loser %s has an admission: %v", key, err)
				}
			}
		}
		if rep := checkLedger(t, store); rep.Consumed != 1 || rep.Admissions != 1 {
			t.Fatalf("ledger holds %+v; want one consumption and one admission", rep)
		}
	})
}

// TestOneKeyManyIdenticalRequests: 50 concurrent identical requests under
// one key. The confirmation is consumed once and every caller gets the same
// allow: one fresh, the others as idempotent replays.
func TestOneKeyManyIdenticalRequests(t *testing.T) {
	forEachBackend(t, func(t *testing.T, base string, store ledger.Store) {
		a := newActor(t, base, "acct_race", "bk_race_01")
		ref, key := raceOneKey(t, []*actor{a}, identicalReqs)

		c, err := store.Confirmation(context.Background(), ref)
		if err != nil || c.State != ledger.ConfirmationConsumed || c.ConsumedBy != key {
			t.Fatalf("confirmation %q by %q, %v; want consumed by %s", c.State, c.ConsumedBy, err, key)
		}
		if rep := checkLedger(t, store); rep.Consumed != 1 || rep.Admissions != 1 {
			t.Fatalf("ledger holds %+v; want one consumption and one admission", rep)
		}
	})
}

// TestTwoProcessesOnePostgres: both races again, with the requests spread
// over two itogate processes sharing one PostgreSQL ledger, plus what
// replicas must agree on: a deposit on one is usable on the other, and a
// key admitted on one answers the same on the other.
func TestTwoProcessesOnePostgres(t *testing.T) {
	opts := pgOptions(t)
	// Forty commits queue on one row lock across two processes on a shared
	// machine: the statement bound is generous here; the fault tests check
	// the production bounds.
	flags := []string{"--ledger-dsn", opts.DSN, "--ledger-schema", opts.Schema, "--ledger-timeout", requestTimeout.String()}
	p1 := startServe(t, t.TempDir(), flags...)
	p2 := startServe(t, t.TempDir(), flags...)
	a1 := newActor(t, p1.url, "acct_race", "bk_race_01")
	a2 := a1.at(t, p2.url)
	actors := []*actor{a1, a2}

	t.Run("one confirmation, many keys", func(t *testing.T) {
		_, winner := raceOneConfirmation(t, actors, manyKeys)
		for _, a := range actors {
			if r, err := a.status(context.Background(), winner); err != nil || r.Status != http.StatusOK {
				t.Fatalf("status of %s on %s: %v %v", winner, a.base, r, err)
			}
		}
	})
	t.Run("one key, identical requests", func(t *testing.T) {
		raceOneKey(t, actors, identicalReqs)
	})
	t.Run("deposit on one, admit on the other", func(t *testing.T) {
		ref := a1.confirmation(t, "train.create", nil)
		r := a2.mustAdmit(t, a2.create(a2.entitlement(t, nil), ref, "cross-1"), http.StatusOK, "")
		again := a1.mustAdmit(t, a1.create(a1.entitlement(t, nil), ref, "cross-1"), http.StatusOK, "")
		if again.Data.RunID != r.Data.RunID || !strings.Contains(again.Notice, "replay") {
			t.Fatalf("replay on the other replica: %s, want run %s", again, r.Data.RunID)
		}
		a1.mustAdmit(t, a1.create(a1.entitlement(t, nil), ref, "cross-2"), http.StatusForbidden, "CONFIRMATION_REPLAYED")
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := postgres.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if rep := checkLedger(t, store); rep.Consumed != 3 || rep.Admissions != 3 {
		t.Fatalf("ledger holds %+v; want three consumptions and three admissions", rep)
	}
}

func raceKey(i int) string { return fmt.Sprintf("race-%03d", i) }

// raceOneConfirmation sends n admissions of one fresh confirmation at once,
// key raceKey(i) to actors[i % len(actors)], and checks exactly one allow
// and n-1 CONFIRMATION_REPLAYED, each loser's key unknown to the status
// route. It returns the reference and the winning key.
func raceOneConfirmation(t *testing.T, actors []*actor, n int) (ref, winner string) {
	t.Helper()
	a0 := actors[0]
	ent := a0.entitlement(t, nil)
	ref = a0.confirmation(t, "train.create", nil)
	answers, errs := race(n, func(i int) (answer, error) {
		a := actors[i%len(actors)]
		return a.admit(context.Background(), a.create(ent, ref, raceKey(i)))
	})
	var runID string
	for i, r := range answers {
		switch {
		case errs[i] != nil:
			t.Fatalf("request %d: %v", i, errs[i])
		case r.Status == http.StatusOK:
			if winner != "" {
				t.Fatalf("two allows for one confirmation: %s and %s", winner, raceKey(i))
			}
			winner, runID = raceKey(i), r.Data.RunID
		case r.Status == http.StatusForbidden && r.code() == "CONFIRMATION_REPLAYED":
		default:
			t.Fatalf("request %d: %s; want 200 or 403 CONFIRMATION_REPLAYED", i, r)
		}
	}
	if winner == "" {
		t.Fatal("no request was allowed")
	}
	for i := range n {
		a := actors[i%len(actors)]
		r, err := a.status(context.Background(), raceKey(i))
		switch {
		case err != nil:
			t.Fatal(err)
		case raceKey(i) == winner && (r.Status != http.StatusOK || r.Data.RunID != runID):
			t.Fatalf("status of the winner %s: %s", winner, r)
		case raceKey(i) != winner && (r.Status != http.StatusNotFound || r.code() != "ADMISSION_NOT_FOUND"):
			t.Fatalf("status of loser %s: %s; want 404 ADMISSION_NOT_FOUND", raceKey(i), r)
		}
	}
	return ref, winner
}

// raceOneKey sends n identical admissions (one key, one confirmation) at
// once, spread over actors, and checks that every caller got the same
// allow, exactly one of them fresh. It returns the reference and the key.
func raceOneKey(t *testing.T, actors []*actor, n int) (ref, key string) {
	t.Helper()
	a0 := actors[0]
	ent := a0.entitlement(t, nil)
	ref = a0.confirmation(t, "train.create", nil)
	key = fmt.Sprintf("same-%d", time.Now().UnixNano())
	answers, errs := race(n, func(i int) (answer, error) {
		a := actors[i%len(actors)]
		return a.admit(context.Background(), a.create(ent, ref, key))
	})
	fresh := 0
	var runID, decisionID string
	for i, r := range answers {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if r.Status != http.StatusOK || r.Data.Decision != "allow" {
			t.Fatalf("request %d: %s; want the allow", i, r)
		}
		if runID == "" {
			runID, decisionID = r.Data.RunID, r.Data.DecisionID
		}
		if r.Data.RunID != runID || r.Data.DecisionID != decisionID {
			t.Fatalf("request %d: run %s decision %s; another caller got run %s decision %s",
				i, r.Data.RunID, r.Data.DecisionID, runID, decisionID)
		}
		if !strings.Contains(r.Notice, "replay") {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d fresh allows, want exactly 1 (the rest replays)", fresh)
	}
	return ref, key
}

// race runs n calls of fn at once and collects their results.
func race(n int, fn func(i int) (answer, error)) ([]answer, []error) {
	answers, errs := make([]answer, n), make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return answers, errs
}
