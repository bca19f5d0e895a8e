package main

import (
	"context"
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/policies"
)

// TestAllowEverythingBundleCannotSpend: a signed bundle whose decision
// allows everything, loaded the normal way (a bundle file verified with the
// bundle key), still cannot make the ledger consume a confirmation for
// another manifest, booking, action, account or run, nor for less than the
// run's cost, nor admit a run past the term or beyond its booking's GPUs.
// Each attempt is denied with its code and consumes nothing: afterwards the
// very same confirmation admits the request it was issued for.
func TestAllowEverythingBundleCannotSpend(t *testing.T) {
	url, logs := startServe(t, &serveOptions{bundleFile: allowAllBundle(t)}, true)
	f := newSpendFixture(t, url, logs)
	f.mismatchesSpendNothing()

	// The confirmation was never consumed: it admits what it was issued for.
	a, err := f.r.Admit(f.ctx, f.createReq(f.ref, "the-run"))
	if err != nil || a.Status != 200 {
		t.Fatalf("the confirmation's own request: %+v %v\n%s", a, err, logs.String())
	}
	f.fullBookingFreedByCancel(a.Data.RunID)
}

// allowAllBundle writes a bundle signed with the development bundle key
// whose decision allows everything, and returns its path.
func allowAllBundle(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "allow-all.tar.gz")
	at := time.Now().UTC().Truncate(time.Second)
	dev := bundletest.DevSigner()
	// Its rules allow everything; its data is the shipped bundle's, so the
	// commit can price the run's expected lost work and the refusals below
	// are the ledger's own checks of the confirmation.
	files := bundletest.Decision()
	maps.Copy(files, bundletest.Data(t, policies.Bundle()))
	raw := bundletest.Build(t, bundletest.Spec{Files: files,
		Manifest: bundletest.Manifest(bundletest.Revision(at, "allow-all"), at)}, &dev)
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// spendFixture drives full-booking creates of llama3-8b against a server:
// ent books exactly the manifest's topology (one run fills it), ref is the
// one confirmation every mismatch tries to spend.
type spendFixture struct {
	t            *testing.T
	ctx          context.Context
	r            *scenario.Runner
	m            scenario.Manifest
	logs         *syncBuffer
	digest, cost string
	ent, ref     string
}

func newSpendFixture(t *testing.T, url string, logs *syncBuffer) *spendFixture {
	t.Helper()
	r, m := scenarioFor(t, url, "llama3-8b")
	f := &spendFixture{t: t, ctx: context.Background(), r: r, m: m, logs: logs, digest: manifest.Digest(m.Raw)}
	f.cost, _ = m.Doc["budget"].(map[string]any)["ceiling_usd"].(string)
	f.ent = f.entitlement(m, f.exact)
	f.ref = f.confirm("train.create", f.digest, f.cost, "")
	return f
}

// exact books exactly the manifest's nodes.
func (f *spendFixture) exact(c map[string]any) {
	c["gpu"].(map[string]any)["nodes"] = f.m.Doc["hardware"].(map[string]any)["nodes"]
}

func (f *spendFixture) entitlement(m scenario.Manifest, tweak func(map[string]any)) string {
	f.t.Helper()
	ent, err := f.r.EntitlementFor(m, tweak)
	if err != nil {
		f.t.Fatal(err)
	}
	return ent
}

func (f *spendFixture) confirm(act, digest, cost, runID string) string {
	f.t.Helper()
	ref, err := f.r.Confirm(f.ctx, act, digest, cost, runID)
	if err != nil {
		f.t.Fatal(err)
	}
	return ref
}

func (f *spendFixture) createReq(ref, key string) api.AdmissionRequest {
	return api.AdmissionRequest{Action: "train.create", BookingID: scenario.Booking, IdempotencyKey: key,
		Manifest: f.m.Raw, ManifestSignature: f.m.Signature, EntitlementToken: f.ent, ConfirmationRef: ref}
}

func (f *spendFixture) cancelReq(ref, key, runID string) api.AdmissionRequest {
	return api.AdmissionRequest{Action: "train.cancel", BookingID: scenario.Booking,
		IdempotencyKey: key, EntitlementToken: f.ent, ConfirmationRef: ref, RunID: runID}
}

// expect: req is denied with status and code, and nothing was admitted
// under its key.
func (f *spendFixture) expect(name string, req api.AdmissionRequest, status int, code string) {
	f.t.Helper()
	a, err := f.r.Admit(f.ctx, req)
	if err != nil {
		f.t.Fatal(err)
	}
	if a.Status != status || a.Error == nil || string(a.Error.Code) != code {
		f.t.Fatalf("%s: %d %+v, want %d %s\n%s", name, a.Status, a.Error, status, code, f.logs.String())
	}
	if s, _ := f.r.Status(f.ctx, req.IdempotencyKey); s.Status != 404 {
		f.t.Fatalf("%s: status of the key = %d, want 404 (nothing admitted)", name, s.Status)
	}
}

// mismatchesSpendNothing: ref, or a confirmation like it, offered for
// another manifest, booking, cost, term or action is denied.
func (f *spendFixture) mismatchesSpendNothing() {
	other, err := f.r.LoadManifest("llama3-70b")
	if err != nil {
		f.t.Fatal(err)
	}
	// Another manifest (signed, valid) with this manifest's confirmation.
	bad := f.createReq(f.ref, "other-manifest")
	bad.Manifest, bad.ManifestSignature = other.Raw, other.Signature
	bad.EntitlementToken = f.entitlement(other, nil)
	f.expect("another manifest", bad, 403, "CONFIRMATION_INVALID")

	// Another booking: its own entitlement, this booking's confirmation.
	bad = f.createReq(f.ref, "other-booking")
	bad.BookingID = "bk_other"
	bad.EntitlementToken = f.entitlement(f.m, func(c map[string]any) { c["booking_id"] = "bk_other" })
	f.expect("another booking", bad, 403, "CONFIRMATION_INVALID")

	// A cost below the estimate (64 GPUs × 6 h × 2.49 = 956.16 USD, and its expected lost work).
	cheap := f.confirm("train.create", f.digest, "1.00", "")
	f.expect("a lower cost", f.createReq(cheap, "cheap"), 403, "CONFIRMATION_COST_BELOW_ESTIMATE")

	// A run that ends after the term.
	late := f.createReq(f.ref, "past-term")
	late.EntitlementToken = f.entitlement(f.m, func(c map[string]any) {
		f.exact(c)
		c["term"].(map[string]any)["end"] = time.Now().Add(time.Hour).Unix()
	})
	f.expect("past the term", late, 403, "BUDGET_RUN_PAST_TERM")

	// A confirmation for another action.
	cancelRef := f.confirm("train.cancel", f.digest, f.cost, "run_x")
	f.expect("another action", f.createReq(cancelRef, "other-action"), 403, "CONFIRMATION_INVALID")
}

// fullBookingFreedByCancel: with run filling the booking, a second
// full-booking run is refused naming it; a cancel bound to another run
// cannot end it; its own cancel frees the booking for the second run.
func (f *spendFixture) fullBookingFreedByCancel(run string) {
	t := f.t
	ref2 := f.confirm("train.create", f.digest, f.cost, "")
	status, body := f.r.Raw(f.ctx, f.createReq(ref2, "second"))
	var env struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal([]byte(body), &env)
	if status != 403 || env.Error.Code != "BOOKING_CAPACITY_EXCEEDED" || !contains(env.Error.Message, run) {
		t.Fatalf("second full-booking run: %d %s", status, body)
	}

	otherRun := f.confirm("train.cancel", "", "0", "run_01aaaaaaaaaaaaaaaaaaaaaaaa")
	f.expect("a cancel bound to another run", f.cancelReq(otherRun, "cancel-other", run), 403, "CONFIRMATION_INVALID")

	cancel := f.confirm("train.cancel", "", "0", run)
	if a, err := f.r.Admit(f.ctx, f.cancelReq(cancel, "cancel", run)); err != nil || a.Status != 200 {
		t.Fatalf("cancel: %+v %v", a, err)
	}
	if a, err := f.r.Admit(f.ctx, f.createReq(ref2, "second-after-cancel")); err != nil || a.Status != 200 {
		t.Fatalf("second run after the cancel: %+v %v", a, err)
	}
}

func contains(s, sub string) bool { return sub != "" && strings.Contains(s, sub) }

// TestEvalExplainsCapacity: itogate eval takes the booking's usage as input
// and explains a capacity deny offline.
func TestEvalExplainsCapacity(t *testing.T) {
	// A private copy: the safe reader refuses a group-writable checkout.
	raw, err := fs.ReadFile(fixtures.Manifests(), "llama3-8b.json")
	if err != nil {
		t.Fatal(err)
	}
	m := filepath.Join(t.TempDir(), "llama3-8b.json")
	if err := os.WriteFile(m, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	// The race detector slows evaluation tenfold on a shared machine.
	deadline := "--deadline=" + patience.Deadline.String()
	if res := runCLI(t, "eval", "--manifest", m, deadline); res.exit != 0 {
		t.Fatalf("eval on an empty booking: exit %d\n%s", res.exit, res.stdout)
	}
	res := runCLI(t, "eval", "--manifest", m, "--held-gpus", "8", deadline)
	if res.exit != exitDenied || !strings.Contains(res.stdout, "BOOKING_CAPACITY_EXCEEDED") ||
		!strings.Contains(res.stdout, "the booking's 64 GPUs cannot hold 64 more: 8 are held by live runs") {
		t.Fatalf("eval with 8 GPUs held: exit %d\n%s", res.exit, res.stdout)
	}
	res = runCLI(t, "eval", "--manifest", m, "--released", deadline)
	if res.exit != exitDenied || !strings.Contains(res.stdout, "BOOKING_RELEASED") {
		t.Fatalf("eval on a released booking: exit %d\n%s", res.exit, res.stdout)
	}
}

// TestCapacityRaceOverHTTP: 10 concurrent full-booking creates on one
// booking, each with its own confirmation and key, through a real server:
// exactly one allow, every other BOOKING_CAPACITY_EXCEEDED naming it. The
// winner's GPUs are reported by status and counted in the aggregate
// metrics, which carry no booking label.
func TestCapacityRaceOverHTTP(t *testing.T) {
	url, logs := startServe(t, &serveOptions{}, true)
	f := newSpendFixture(t, url, logs)
	const n = 10
	reqs := make([]api.AdmissionRequest, n)
	for i := range reqs {
		ref := f.ref // the fixture's confirmation for the first, a new one each for the rest
		if i > 0 {
			ref = f.confirm("train.create", f.digest, f.cost, "")
		}
		reqs[i] = f.createReq(ref, "race-"+strconv.Itoa(i))
	}
	answers := raceAdmissions(f, reqs)
	winner := -1
	for i, a := range answers {
		if a.status == 200 {
			if winner >= 0 {
				t.Fatalf("two allows: %d and %d", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no allow: %+v", answers)
	}
	var won struct {
		Data struct {
			RunID     string `json:"run_id"`
			GPUs      int    `json:"gpus"`
			LiveUntil int64  `json:"live_until"`
		} `json:"data"`
	}
	_ = json.Unmarshal([]byte(answers[winner].body), &won)
	for i, a := range answers {
		if i != winner && (a.status != 403 || !strings.Contains(a.body, `"code":"BOOKING_CAPACITY_EXCEEDED"`) ||
			!strings.Contains(a.body, won.Data.RunID)) {
			t.Fatalf("loser %d: %d %s", i, a.status, a.body)
		}
	}
	if won.Data.GPUs != 64 || won.Data.LiveUntil <= time.Now().Unix() {
		t.Fatalf("allow data: %+v", won.Data)
	}
	st, body := f.r.Raw(f.ctx, reqs[winner]) // an exact retry: the stored allow, GPUs included
	if st != 200 || !strings.Contains(body, `"gpus":64`) || !strings.Contains(body, won.Data.RunID) {
		t.Fatalf("replay of the winner: %d %s", st, body)
	}
	_, metrics := get(t, url+"/metrics")
	if !strings.Contains(metrics, `itogate_run_gpus_total{event="admitted"} 64`) ||
		!strings.Contains(metrics, `itogate_booking_held_ratio_count 1`) || strings.Contains(metrics, scenario.Booking) {
		t.Fatalf("metrics:\n%s", grepLines(metrics, "itogate_run_gpus_total")+grepLines(metrics, "itogate_booking_held_ratio"))
	}
}

type rawAnswer struct {
	status int
	body   string
}

// raceAdmissions sends every request at once and returns the answers.
// ADMISSION_OVERLOADED is not an answer (nothing was evaluated or
// consumed): a request is retried with the same key, as a client does.
func raceAdmissions(f *spendFixture, reqs []api.AdmissionRequest) []rawAnswer {
	answers := make([]rawAnswer, len(reqs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range reqs {
		wg.Go(func() {
			<-start
			for range 100 {
				answers[i].status, answers[i].body = f.r.Raw(f.ctx, reqs[i])
				if answers[i].status != 503 || !strings.Contains(answers[i].body, `"ADMISSION_OVERLOADED"`) {
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	return answers
}
