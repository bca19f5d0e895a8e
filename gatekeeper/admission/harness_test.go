package admission_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ledger/bolt"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/verify"
	"github.com/itocompute/itogate/policies"
)

// now is the pinned clock of every Service in these tests.
var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const (
	sigOK     = "sig-ok" // the only manifest signature fakeManifests accepts
	bundleRev = "rev-test"
	// costOK covers the llama3-8b run (64 GPUs × 6 h × 2.49 USD = 956.16, and
	// 2.12 for the GPU-hours it is expected to lose to failures).
	costOK = "2000.00"
)

var caller = admission.Caller{Subject: "svc-demo-trainer", Account: scenario.Account, KeyID: "caller-key-1"}

// tokenAnswer is what fakeTokens answers for one token.
type tokenAnswer struct {
	claims *verify.Claims
	err    error
}

// fakeTokens is an admission.TokenVerifier that knows the tokens it was
// given: each maps to its claims or its error; any other token is
// malformed.
type fakeTokens struct {
	purpose verify.Purpose
	tokens  map[string]tokenAnswer
}

func (f *fakeTokens) Verify(raw []byte, _ time.Time) (*verify.Claims, error) {
	a, ok := f.tokens[string(raw)]
	if !ok {
		return nil, &verify.Error{Purpose: f.purpose, Kind: verify.KindMalformed, Err: errors.New("not a test token")}
	}
	if a.err != nil {
		return nil, a.err
	}
	c := *a.claims
	c.Raw = maps.Clone(c.Raw)
	return &c, nil
}

// fakeManifests accepts the signature sigOK over any bytes.
type fakeManifests struct{}

func (fakeManifests) Verify(_ []byte, sig string) (string, error) {
	if sig == sigOK {
		return "manifest-key-1", nil
	}
	return "", &verify.Error{Purpose: verify.PurposeManifest, Kind: verify.KindSignature,
		Err: errors.New("no pinned signer verifies")}
}

// fakeDecider answers a chosen decision or error. during, when set, runs
// once inside Decide: an admission racing this one between its policy
// read and its commit.
type fakeDecider struct {
	decision policy.Decision
	err      error
	calls    int
	input    map[string]any
	during   func()
}

func (d *fakeDecider) Decide(_ context.Context, in map[string]any) (policy.Decision, error) {
	d.calls++
	d.input = in
	if f := d.during; f != nil {
		d.during = nil
		f()
	}
	return d.decision, d.err
}

func (d *fakeDecider) Revision() string { return bundleRev }

// Facts is the embedded bundle's training-facts model, so the server path
// builds input.facts as it does for a real engine.
func (d *fakeDecider) Facts() *trainfacts.Model { return embeddedFacts() }

// noFacts is a decider without a training-facts model: its inputs carry no
// input.facts.
type noFacts struct{ *fakeDecider }

func (noFacts) Facts() *trainfacts.Model { return nil }

// withTelemetry is an entitlement tweak: a telemetry claim measured 200 s
// before now over a week, with rate interruptions per GPU-hour.
func withTelemetry(rate float64) func(map[string]any) {
	return func(m map[string]any) {
		m["telemetry"] = map[string]any{
			"measured_at": now.Unix() - 200, "window_seconds": int64(604800), "interruptions_per_gpu_hour": rate,
		}
	}
}

var embeddedFacts = sync.OnceValue(func() *trainfacts.Model {
	e, err := policy.New(context.Background(), policy.Options{Bundle: policies.Bundle()})
	if err != nil {
		panic(err)
	}
	return e.Facts() // with the layout search's fix on a parallelism deny
})

func allow() *fakeDecider {
	return &fakeDecider{decision: policy.Decision{Allow: true}}
}

func deny(codes ...api.Code) *fakeDecider {
	d := &fakeDecider{}
	for _, c := range codes {
		d.decision.Violations = append(d.decision.Violations,
			api.Finding{Code: c, Gate: "test", Message: "violated " + string(c)})
	}
	return d
}

// env is one Service over a fresh bbolt ledger in t.TempDir(), with fake
// verifiers and decider, and the fixture manifest llama3-8b.json.
type env struct {
	svc      *admission.Service
	store    *bolt.Store
	ents     *fakeTokens
	confs    *fakeTokens
	evals    *fakeTokens         // the eval authority (trust.evals)
	otherRun string              // a case's run of another account, for its check
	decider  admission.Decider   // what Options.Policy returns; nil: no bundle
	opts     admission.Options   // what svc was built with
	disk     *disk               // the decision log's file (withDecisionLog)
	dlog     *decisionlog.Logger // the decision log (withDecisionLog)
	raw      []byte
	doc      map[string]any
	digest   string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	raw, err := fs.ReadFile(fixtures.Manifests(), "llama3-8b.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := manifest.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	store, err := bolt.Open(filepath.Join(t.TempDir(), "ledger.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	e := &env{
		store:  store,
		ents:   &fakeTokens{purpose: verify.PurposeEntitlement, tokens: map[string]tokenAnswer{}},
		confs:  &fakeTokens{purpose: verify.PurposeConfirmation, tokens: map[string]tokenAnswer{}},
		evals:  &fakeTokens{purpose: verify.PurposeEvals, tokens: map[string]tokenAnswer{}},
		raw:    raw,
		doc:    doc,
		digest: manifest.Digest(raw),
	}
	e.decider = allow()
	e.opts = admission.Options{
		Entitlement: e.ents, Confirmation: e.confs, Evals: e.evals, Manifests: fakeManifests{}, Ledger: store,
		Policy: func() admission.Decider { return e.decider },
		Now:    func() time.Time { return now },
	}
	e.svc, err = admission.New(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// withDecisionLog rebuilds the Service over the same ledger with a
// decision log writing to d (required: production's rule), closed when the
// test ends.
func (e *env) withDecisionLog(t *testing.T, d *disk, required bool) *decisionlog.Logger {
	t.Helper()
	l := decisionlog.New(d, decisionlog.Options{Sync: d.Sync, Required: required, OnDrop: d.dropped})
	t.Cleanup(l.Close)
	e.opts.DecisionLog, e.disk, e.dlog = l, d, l
	svc, err := admission.New(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	return l
}

// disk is a decision log file that fails on demand as a full disk does
// (every Write and Sync fails with ENOSPC while full). onWrite, when set,
// runs before each successful Write with what it writes.
type disk struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	full    bool
	onWrite func(p []byte)
	drops   map[string]int
}

func (d *disk) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.full {
		return 0, syscall.ENOSPC
	}
	if d.onWrite != nil {
		d.onWrite(p)
	}
	return d.buf.Write(p)
}

func (d *disk) Sync() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.full {
		return syscall.ENOSPC
	}
	return nil
}

func (d *disk) setFull(full bool) {
	d.mu.Lock()
	d.full = full
	d.mu.Unlock()
}

func (d *disk) dropped(reason string) {
	d.mu.Lock()
	if d.drops == nil {
		d.drops = map[string]int{}
	}
	d.drops[reason]++
	d.mu.Unlock()
}

// lines are the log's lines (close the log first).
func (d *disk) lines(t *testing.T) []decisionlog.Event {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	evs, err := decisionlog.ReadAll(bytes.NewReader(d.buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// asVerified turns claims built in Go (json.Number, int) into what
// verify.Claims.Raw holds: numbers int64 when integral, else float64.
func asVerified(m map[string]any) map[string]any {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var out map[string]any
	if err := dec.Decode(&out); err != nil {
		panic(err)
	}
	return numbers(out).(map[string]any)
}

func numbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

// entitlement registers an entitlement token with scenario.EntitlementClaims
// (booking scenario.Booking of 1000× the manifest's nodes, 2.49 USD per
// GPU-hour, a 30-day term) and jti; tweak may edit the claims.
func (e *env) entitlement(jti string, tweak func(map[string]any)) string {
	return e.entitlementFrom(scenario.EntitlementClaims(e.doc, now), jti, tweak)
}

// exactEntitlement is entitlement for a booking of exactly the manifest's
// 64 GPUs (scenario.ExactEntitlementClaims).
func (e *env) exactEntitlement(jti string) string {
	return e.entitlementFrom(scenario.ExactEntitlementClaims(e.doc, now), jti, nil)
}

func (e *env) entitlementFrom(claims map[string]any, jti string, tweak func(map[string]any)) string {
	raw := asVerified(claims)
	raw["jti"] = jti
	if tweak != nil {
		tweak(raw)
	}
	id, _ := raw["jti"].(string)
	sub, _ := raw["sub"].(string)
	tok := "ent." + jti
	e.ents.tokens[tok] = tokenAnswer{claims: &verify.Claims{
		KeyID: "ent-key-1", JTI: id, Subject: sub, Issuer: trust.DevEntitlementIssuer,
		Audience: []string{trust.DevAudience}, IssuedAt: now, Expiry: now.Add(5 * time.Minute), Raw: raw,
	}}
	return tok
}

// entitlementErr registers an entitlement token that fails with err.
func (e *env) entitlementErr(name string, err error) string {
	tok := "ent.bad." + name
	e.ents.tokens[tok] = tokenAnswer{err: err}
	return tok
}

// confirmation registers a confirmation token like scenario.ConfirmWith
// mints: for act on scenario.Booking, by scenario.Account, bound to the
// manifest digest (train.create and train.stage.advance), to runID when
// given, with cost; expiring 10 minutes after now. tweak may edit the
// claims (the exp claim and Expiry move together).
func (e *env) confirmation(jti string, act api.Action, runID, cost string, tweak func(map[string]any)) string {
	raw := map[string]any{
		"iss": trust.DevConfirmationIssuer, "aud": trust.DevAudience, "sub": scenario.Account,
		"iat": now.Unix(), "exp": now.Add(10 * time.Minute).Unix(), "jti": jti,
		"act": string(act), "booking_id": scenario.Booking, "cost_usd": cost,
	}
	if act == api.TrainCreate || act == api.TrainStageAdvance {
		raw["manifest_digest"] = e.digest
	}
	if runID != "" {
		raw["run_id"] = runID
	}
	if tweak != nil {
		tweak(raw)
	}
	id, _ := raw["jti"].(string)
	sub, _ := raw["sub"].(string)
	exp, _ := raw["exp"].(int64)
	tok := "cnf." + jti
	e.confs.tokens[tok] = tokenAnswer{claims: &verify.Claims{
		KeyID: "cnf-key-1", JTI: id, Subject: sub, Issuer: trust.DevConfirmationIssuer,
		Audience: []string{trust.DevAudience}, IssuedAt: now, Expiry: time.Unix(exp, 0).UTC(), Raw: raw,
	}}
	return tok
}

// deposit deposits token and returns its reference.
func (e *env) deposit(t *testing.T, token string) string {
	t.Helper()
	o := e.svc.Deposit(context.Background(), token)
	if o.HTTPStatus() != 201 {
		t.Fatalf("deposit %s: %d %s %s", token, o.HTTPStatus(), o.Code, o.Message)
	}
	return o.Extra.(api.Deposit).ConfirmationRef
}

// confirm registers and deposits a confirmation; see confirmation.
func (e *env) confirm(t *testing.T, jti string, act api.Action, runID, cost string) string {
	t.Helper()
	return e.deposit(t, e.confirmation(jti, act, runID, cost, nil))
}

func (e *env) createReq(key, ref, ent string) admission.Request {
	return admission.Request{
		Action: api.TrainCreate, BookingID: scenario.Booking, IdempotencyKey: key,
		Manifest: e.raw, ManifestSignature: sigOK, EntitlementToken: ent, ConfirmationRef: ref,
	}
}

// runReq is a request acting on runID (cancel, cleanup, advance, restart)
// or, for booking.release, on the booking.
func (e *env) runReq(action api.Action, key, ref, ent, runID string) admission.Request {
	req := admission.Request{
		Action: action, BookingID: scenario.Booking, IdempotencyKey: key,
		EntitlementToken: ent, ConfirmationRef: ref, RunID: runID,
	}
	if action == api.TrainStageAdvance {
		req.Manifest, req.ManifestSignature, req.Stage = e.raw, sigOK, "midtrain"
	}
	if action == api.TrainRestart {
		req.CheckpointStep = new(int64(0)) // the step the confirmation names
	}
	return req
}

// mustAdmit admits req with an allowing decider and fails unless allowed.
func (e *env) mustAdmit(t *testing.T, c admission.Caller, req admission.Request) admission.Outcome {
	t.Helper()
	saved := e.decider
	e.decider = allow()
	defer func() { e.decider = saved }()
	o := e.svc.Admit(context.Background(), c, req)
	if o.HTTPStatus() != 200 || o.Code != "" {
		t.Fatalf("setup admission %s %s: %d %s %s", req.Action, req.IdempotencyKey, o.HTTPStatus(), o.Code, o.Message)
	}
	return o
}

// withStageNodes makes the env's manifest give stage its own
// hardware.nodes (stage_settings): the manifest every later request
// carries, and the digest a confirmation binds.
func (e *env) withStageNodes(t *testing.T, stage string, nodes int) {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(e.raw, &doc); err != nil {
		t.Fatal(err)
	}
	doc["stage_settings"] = map[string]any{stage: map[string]any{"hardware": map[string]any{"nodes": nodes}}}
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if e.doc, err = manifest.Parse(raw); err != nil {
		t.Fatal(err)
	}
	e.raw, e.digest = raw, manifest.Digest(raw)
}

// admitRun admits a train.create of the manifest for scenario.Account on
// scenario.Booking (key "key-run", its own confirmation and entitlement)
// and returns the run id.
func (e *env) admitRun(t *testing.T) string {
	t.Helper()
	ref := e.confirm(t, "cnf-run", api.TrainCreate, "", costOK)
	return e.mustAdmit(t, caller, e.createReq("key-run", ref, e.entitlement("ent-run", nil))).Data.RunID
}

// admitRunAs admits a run for another account or booking, with
// confirmation and entitlement to match.
func (e *env) admitRunAs(t *testing.T, c admission.Caller, bookingID string) string {
	t.Helper()
	ref := e.deposit(t, e.confirmation("cnf-run-"+c.Account+"-"+bookingID, api.TrainCreate, "", costOK,
		func(m map[string]any) { m["sub"], m["booking_id"] = c.Account, bookingID }))
	ent := e.entitlement("ent-run-"+c.Account+"-"+bookingID, func(m map[string]any) {
		m["sub"], m["booking_id"] = c.Account, bookingID
	})
	req := e.createReq("key-run-"+c.Account+"-"+bookingID, ref, ent)
	req.BookingID = bookingID
	return e.mustAdmit(t, c, req).Data.RunID
}

// haltRun halts runID (in stage pretrain, mmlu_5shot failed) straight in
// the ledger, a minute before now.
func (e *env) haltRun(t *testing.T, runID string) {
	t.Helper()
	_, halted, err := e.store.HaltRun(context.Background(), ledger.Halt{RunID: runID, Account: caller.Account,
		BookingID: scenario.Booking, RunHalt: ledger.RunHalt{At: now.Add(-time.Minute), DecisionID: "dec_halting",
			Stage: "pretrain", ReportDigest: "sha256:" + strings.Repeat("e", 64), FailedEvals: []string{"mmlu_5shot"},
			By: "evals:evals-key-1"}})
	if err != nil || !halted {
		t.Fatalf("HaltRun = %v, %v", halted, err)
	}
}

// revoke stores a revocation straight in the ledger.
func (e *env) revoke(t *testing.T, kind ledger.RevocationKind, subject string) {
	t.Helper()
	_, _, err := e.store.Revoke(context.Background(), ledger.Revocation{Kind: kind, Subject: subject,
		RevokedBy: "test-revoker", RevokedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
}

// snapshot is what the ledger holds for one request: its confirmation,
// the admission under its key, its run's record, the booking's usage.
type snapshot struct {
	conf      ledger.Confirmation
	confFound bool
	adm       ledger.Admission
	admFound  bool
	run       ledger.RunRecord
	runFound  bool
	usage     ledger.BookingUsage
}

func (e *env) snap(t *testing.T, c admission.Caller, req admission.Request) snapshot {
	t.Helper()
	ctx := context.Background()
	var s snapshot
	var err error
	s.conf, err = e.store.Confirmation(ctx, req.ConfirmationRef)
	s.confFound = found(t, err)
	s.adm, err = e.store.Admission(ctx, c.Account, req.IdempotencyKey)
	s.admFound = found(t, err)
	if req.RunID != "" {
		s.run, err = e.store.RunRecord(ctx, req.RunID)
		s.runFound = found(t, err)
	}
	s.usage, err = e.store.BookingUsage(ctx, scenario.Booking, now)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func found(t *testing.T, err error) bool {
	t.Helper()
	switch {
	case err == nil:
		return true
	case errors.Is(err, ledger.ErrNotFound):
		return false
	}
	t.Fatal(err)
	return false
}

func violationCodes(vs []api.Finding) []api.Code {
	var out []api.Code
	for _, v := range vs {
		out = append(out, v.Code)
	}
	return out
}

func sameStrings[S ~string](a, b []S) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

// input reads a path of nested objects in a policy input.
func input(in map[string]any, path ...string) any {
	var v any = in
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}
