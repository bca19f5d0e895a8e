package main

import (
	"context"
	"encoding/json"
	"io/fs"
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
)

// TestAllowEverythingBundleCannotSpend: a signed bundle whose decision
// allows everything, loaded the normal way (a bundle file verified with the
// bundle key), still cannot make the ledger consume a confirmation for
// another manifest, booking, action, account or run, nor for less than the
// run's cost, nor admit a run past the term or beyond its booking's GPUs.
// Each attempt is denied with its code and consumes nothing: afterwards the
// very same confirmation admits the request it was issued for.
func TestAllowEverythingBundleCannotSpend(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "allow-all.tar.gz")
	at := time.Now().UTC().Truncate(time.Second)
	dev := bundletest.DevSigner()
	raw := bundletest.Build(t, bundletest.Spec{Files: bundletest.Decision(),
		Manifest: bundletest.Manifest(bundletest.Revision(at, "allow-all"), at)}, &dev)
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	url, logs := startServe(t, &serveOptions{bundleFile: path}, true)
	r, m := scenarioFor(t, url, "llama3-8b")
	ctx := context.Background()
	other, err := r.LoadManifest("llama3-70b")
	if err != nil {
		t.Fatal(err)
	}
	digest := manifest.Digest(m.Raw)
	cost, _ := m.Doc["budget"].(map[string]any)["ceiling_usd"].(string)
	hw := m.Doc["hardware"].(map[string]any)
	// A booking of exactly the manifest's topology: one full run fills it.
	exact := func(c map[string]any) {
		c["gpu"].(map[string]any)["nodes"] = hw["nodes"]
	}
	ent, err := r.EntitlementFor(m, exact)
	if err != nil {
		t.Fatal(err)
	}
	createReq := func(ref, key string) api.AdmissionRequest {
		return api.AdmissionRequest{Action: "train.create", BookingID: scenario.Booking, IdempotencyKey: key,
			Manifest: m.Raw, ManifestSignature: m.Signature, EntitlementToken: ent, ConfirmationRef: ref}
	}
	// The one confirmation every mismatch tries to spend.
	ref, err := r.Confirm(ctx, "train.create", digest, cost, "")
	if err != nil {
		t.Fatal(err)
	}
	expect := func(name string, req api.AdmissionRequest, status int, code string) {
		t.Helper()
		a, err := r.Admit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if a.Status != status || a.Error == nil || string(a.Error.Code) != code {
			t.Fatalf("%s: %d %+v, want %d %s\n%s", name, a.Status, a.Error, status, code, logs.String())
		}
		if s, _ := r.Status(ctx, req.IdempotencyKey); s.Status != 404 {
			t.Fatalf("%s: status of the key = %d, want 404 (nothing admitted)", name, s.Status)
		}
	}

	// Another manifest (signed, valid) with this manifest's confirmation.
	bad := createReq(ref, "other-manifest")
	bad.Manifest, bad.ManifestSignature = other.Raw, other.Signature
	bad.EntitlementToken, _ = r.EntitlementFor(other, nil)
	expect("another manifest", bad, 403, "CONFIRMATION_INVALID")

	// Another booking: its own entitlement, this booking's confirmation.
	bad = createReq(ref, "other-booking")
	bad.BookingID = "bk_other"
	bad.EntitlementToken, _ = r.EntitlementFor(m, func(c map[string]any) { c["booking_id"] = "bk_other" })
	expect("another booking", bad, 403, "CONFIRMATION_INVALID")

	// A cost below the estimate (64 GPUs × 6 h × 2.49 = 956.16 USD).
	cheap, err := r.Confirm(ctx, "train.create", digest, "1.00", "")
	if err != nil {
		t.Fatal(err)
	}
	expect("a lower cost", createReq(cheap, "cheap"), 403, "CONFIRMATION_COST_BELOW_ESTIMATE")

	// A run that ends after the term.
	shortTerm, err := r.EntitlementFor(m, func(c map[string]any) {
		exact(c)
		c["term"].(map[string]any)["end"] = time.Now().Add(time.Hour).Unix()
	})
	if err != nil {
		t.Fatal(err)
	}
	late := createReq(ref, "past-term")
	late.EntitlementToken = shortTerm
	expect("past the term", late, 403, "BUDGET_RUN_PAST_TERM")

	// A confirmation for another action.
	cancelRef, err := r.Confirm(ctx, "train.cancel", digest, cost, "run_x")
	if err != nil {
		t.Fatal(err)
	}
	expect("another action", createReq(cancelRef, "other-action"), 403, "CONFIRMATION_INVALID")

	// The confirmation was never consumed: it admits what it was issued for.
	a, err := r.Admit(ctx, createReq(ref, "the-run"))
	if err != nil || a.Status != 200 {
		t.Fatalf("the confirmation's own request: %+v %v\n%s", a, err, logs.String())
	}
	run := a.Data.RunID

	// The booking is full: a second full-booking run is refused, naming the
	// run that holds it.
	ref2, err := r.Confirm(ctx, "train.create", digest, cost, "")
	if err != nil {
		t.Fatal(err)
	}
	status, body := r.Raw(ctx, createReq(ref2, "second"))
	var env struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal([]byte(body), &env)
	if status != 403 || env.Error.Code != "BOOKING_CAPACITY_EXCEEDED" || !contains(env.Error.Message, run) {
		t.Fatalf("second full-booking run: %d %s", status, body)
	}

	// A cancel whose confirmation names another run cannot end this one.
	otherRun, err := r.Confirm(ctx, "train.cancel", "", "0", "run_01aaaaaaaaaaaaaaaaaaaaaaaa")
	if err != nil {
		t.Fatal(err)
	}
	expect("a cancel bound to another run", api.AdmissionRequest{Action: "train.cancel", BookingID: scenario.Booking,
		IdempotencyKey: "cancel-other", EntitlementToken: ent, ConfirmationRef: otherRun, RunID: run}, 403, "CONFIRMATION_INVALID")

	// Cancelling the run frees the booking for the refused one.
	cancel, err := r.Confirm(ctx, "train.cancel", "", "0", run)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := r.Admit(ctx, api.AdmissionRequest{Action: "train.cancel", BookingID: scenario.Booking,
		IdempotencyKey: "cancel", EntitlementToken: ent, ConfirmationRef: cancel, RunID: run}); err != nil || a.Status != 200 {
		t.Fatalf("cancel: %+v %v", a, err)
	}
	if a, err := r.Admit(ctx, createReq(ref2, "second-after-cancel")); err != nil || a.Status != 200 {
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
	url, _ := startServe(t, &serveOptions{}, true)
	r, m := scenarioFor(t, url, "llama3-8b")
	ctx := context.Background()
	digest := manifest.Digest(m.Raw)
	cost, _ := m.Doc["budget"].(map[string]any)["ceiling_usd"].(string)
	hw := m.Doc["hardware"].(map[string]any)
	ent, err := r.EntitlementFor(m, func(c map[string]any) { c["gpu"].(map[string]any)["nodes"] = hw["nodes"] })
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	reqs := make([]api.AdmissionRequest, n)
	for i := range reqs {
		ref, err := r.Confirm(ctx, "train.create", digest, cost, "")
		if err != nil {
			t.Fatal(err)
		}
		reqs[i] = api.AdmissionRequest{Action: "train.create", BookingID: scenario.Booking,
			IdempotencyKey: "race-" + strconv.Itoa(i), Manifest: m.Raw, ManifestSignature: m.Signature,
			EntitlementToken: ent, ConfirmationRef: ref}
	}
	type answer struct {
		status int
		body   string
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range reqs {
		wg.Go(func() {
			<-start
			// ADMISSION_OVERLOADED is not an answer (nothing was evaluated
			// or consumed): retry with the same key, as a client does.
			for range 100 {
				answers[i].status, answers[i].body = r.Raw(ctx, reqs[i])
				if answers[i].status != 503 || !strings.Contains(answers[i].body, `"ADMISSION_OVERLOADED"`) {
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
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
	st, body := r.Raw(ctx, reqs[winner]) // an exact retry: the stored allow, GPUs included
	if st != 200 || !strings.Contains(body, `"gpus":64`) || !strings.Contains(body, won.Data.RunID) {
		t.Fatalf("replay of the winner: %d %s", st, body)
	}
	_, metrics := get(t, url+"/metrics")
	if !strings.Contains(metrics, `itogate_run_gpus_total{event="admitted"} 64`) ||
		!strings.Contains(metrics, `itogate_booking_held_ratio_count 1`) || strings.Contains(metrics, scenario.Booking) {
		t.Fatalf("metrics:\n%s", grepLines(metrics, "itogate_run_gpus_total")+grepLines(metrics, "itogate_booking_held_ratio"))
	}
}
