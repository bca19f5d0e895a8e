package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/internal/patience"
)

const rules = `package ito.admission

violations contains {"code": "TOO_BIG", "gate": "g", "message": "x over limit"} if input.x > data.limit

violations contains {"code": "ODD", "gate": "g", "message": "odd"} if input.x % 2 == 1

decision := {"allow": count(violations) == 0, "violations": [v | some v in violations]}
`

func engine(t *testing.T, limit int) *policy.Engine {
	t.Helper()
	e, err := policy.New(context.Background(), policy.Options{Deadline: patience.Deadline, SkipRequiredRules: true, Bundle: fstest.MapFS{
		"ito/admission/admission.rego": {Data: []byte(rules)},
		"data.json":                    {Data: []byte(`{"limit": ` + string(rune('0'+limit)) + `}`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func events(t *testing.T, e *policy.Engine, xs ...int) []decisionlog.Event {
	t.Helper()
	var out []decisionlog.Event
	for i, x := range xs {
		in := map[string]any{"x": json.Number(string(rune('0' + x)))}
		d, err := e.Decide(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		ev := decisionlog.Event{DecisionID: "dec_" + string(rune('a'+i)), Input: in, PolicyResult: "allow"}
		if !d.Allow {
			ev.PolicyResult = "deny"
		}
		for _, v := range d.Violations {
			ev.PolicyCodes = append(ev.PolicyCodes, string(v.Code))
		}
		out = append(out, ev)
	}
	// A decision made before the policy ran (no input) is skipped.
	return append(out, decisionlog.Event{DecisionID: "dec_z", Result: "deny", Codes: []string{"MANIFEST_SIGNATURE_INVALID"}})
}

func TestReplayReportsEveryFlip(t *testing.T) {
	t.Parallel()
	logged := events(t, engine(t, 8), 2, 4, 6, 7, 9) // limit 8: 9 is TOO_BIG+ODD, 7 is ODD
	r := Run(context.Background(), engine(t, 5), logged)
	if r.Events != 6 || r.Replayed != 5 || r.Skipped != 1 {
		t.Fatalf("counts %+v", r)
	}
	// Under limit 5: 6 flips allow→deny (+TOO_BIG); 7 gains TOO_BIG; 2, 4, 9 unchanged.
	if r.Unchanged != 3 || len(r.Flips) != 2 || r.AllowToDeny != 1 || r.DenyToAllow != 0 {
		t.Fatalf("report %+v", r)
	}
	if r.ByCode["TOO_BIG"].Added != 2 || r.ByCode["ODD"] != (Count{}) {
		t.Fatalf("by code %+v", r.ByCode)
	}
	var out bytes.Buffer
	r.Print(&out)
	if !strings.Contains(out.String(), "allow → deny 1, deny → allow 0") || !strings.Contains(out.String(), "dec_c") {
		t.Fatalf("printed:\n%s", out.String())
	}
	// The same bundle flips nothing.
	if same := Run(context.Background(), engine(t, 8), logged); len(same.Flips) != 0 || same.Unchanged != 5 {
		t.Fatalf("replay against the same bundle: %+v", same)
	}
}

const warnRules = `package ito.admission

warnings contains {"code": "BIG", "gate": "g", "message": "x is big"} if input.x > data.limit

decision := {"allow": true, "violations": [], "warnings": [w | some w in warnings]}
`

func warnEngine(t *testing.T, limit int) *policy.Engine {
	t.Helper()
	e, err := policy.New(context.Background(), policy.Options{Deadline: patience.Deadline, SkipRequiredRules: true, Bundle: fstest.MapFS{
		"ito/admission/admission.rego": {Data: []byte(warnRules)},
		"data.json":                    {Data: []byte(`{"limit": ` + string(rune('0'+limit)) + `}`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestReplayComparesWarnings: a candidate that raises or drops a warning is
// reported (the outcome is unchanged, the caller's answer is not); logs
// written before warnings were recorded are not compared on them.
func TestReplayComparesWarnings(t *testing.T) {
	t.Parallel()
	in := func(x int) map[string]any { return map[string]any{"x": json.Number(string(rune('0' + x)))} }
	logged := []decisionlog.Event{
		{DecisionID: "dec_w1", Input: in(7), PolicyResult: "allow", PolicyWarnings: []string{}},      // 7 > 5: gains BIG
		{DecisionID: "dec_w2", Input: in(3), PolicyResult: "allow", PolicyWarnings: []string{"BIG"}}, // 3 > 5 no more: loses BIG
		{DecisionID: "dec_w3", Input: in(2), PolicyResult: "allow", PolicyWarnings: []string{}},      // unchanged
		{DecisionID: "dec_old", Input: in(9), PolicyResult: "allow"},                                 // no warnings recorded
	}
	r := Run(context.Background(), warnEngine(t, 5), logged)
	if r.Replayed != 4 || r.Unchanged != 2 || len(r.Flips) != 2 || r.AllowToDeny+r.DenyToAllow != 0 {
		t.Fatalf("report %+v", r)
	}
	if f := r.Flips[0]; f.DecisionID != "dec_w1" || strings.Join(f.WarningsAdded, ",") != "BIG" || f.Before != "allow" || f.After != "allow" {
		t.Fatalf("flip %+v", f)
	}
	if f := r.Flips[1]; f.DecisionID != "dec_w2" || strings.Join(f.WarningsRemoved, ",") != "BIG" {
		t.Fatalf("flip %+v", f)
	}
	if r.ByCode["BIG"] != (Count{Added: 1, Removed: 1}) {
		t.Fatalf("by code %+v", r.ByCode)
	}
	var out bytes.Buffer
	r.Print(&out)
	if !strings.Contains(out.String(), "+BIG (warning)") || !strings.Contains(out.String(), "-BIG (warning)") {
		t.Fatalf("printed:\n%s", out.String())
	}
}

// TestReplaySkipsMaskedInputs: decisions whose input lost facts to the mask
// (a manifest that held a credential) or the guard are counted as masked,
// not reported as flips; the confirmation reference, always masked, and a
// redacted idempotency key do not count.
func TestReplaySkipsMaskedInputs(t *testing.T) {
	t.Parallel()
	e := engine(t, 8)
	logged := events(t, e, 2)
	logged[0].Masked = []string{"/confirmation/ref"}
	masked := decisionlog.Event{DecisionID: "dec_m", Input: map[string]any{}, PolicyResult: "deny", PolicyCodes: []string{"DATA_CREDENTIAL_IN_URI"},
		Masked: []string{"/confirmation/ref", "/manifest"}}
	redacted := decisionlog.Event{DecisionID: "dec_r", Input: map[string]any{"x": json.Number("2")}, PolicyResult: "allow",
		Redacted: []string{"/input/manifest/name"}}
	whole := decisionlog.Event{DecisionID: "dec_i", PolicyResult: "allow", Redacted: []string{"/input"}}
	// A redacted idempotency key keeps the decision replayable.
	key := decisionlog.Event{DecisionID: "dec_k", Input: map[string]any{"x": json.Number("4")}, PolicyResult: "allow",
		Redacted: []string{"/idempotency_key", "/input/request/idempotency_key"}}
	r := Run(context.Background(), e, append(logged, masked, redacted, whole, key))
	if r.Masked != 3 || r.Replayed != 2 || r.Unchanged != 2 || len(r.Flips) != 0 || r.Skipped != 1 {
		t.Fatalf("report %+v", r)
	}
}

// slowRules iterate nine million times when input.slow is set: far longer
// than the millisecond the test gives an evaluation, on any machine.
const slowRules = `package ito.admission

violations contains {"code": "SLOW", "gate": "g", "message": "slow"} if {
	input.slow
	count([i | some i in numbers.range(1, 3000); some j in numbers.range(1, 3000); i == j + 4000]) > 0
}

decision := {"allow": count(violations) == 0, "violations": [v | some v in violations]}
`

// TestReplayCountsTimeoutsApartFromFlips: a candidate that cannot decide
// in time (a policy made slow on purpose, a deadline it can never meet)
// is counted as an evaluation error, never as an allow → deny flip; a
// logged decision the server itself could not make (POLICY_TIMEOUT, no
// input) is counted as a baseline error, apart from the skipped ones.
func TestReplayCountsTimeoutsApartFromFlips(t *testing.T) {
	t.Parallel()
	e, err := policy.New(context.Background(), policy.Options{Deadline: time.Millisecond, SkipRequiredRules: true, Bundle: fstest.MapFS{
		"ito/admission/admission.rego": {Data: []byte(slowRules)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	logged := []decisionlog.Event{
		{DecisionID: "dec_slow", Input: map[string]any{"slow": true}, PolicyResult: "allow", PolicyWarnings: []string{}},
		{DecisionID: "dec_timeout", Result: "deny", Status: 503, Codes: []string{"POLICY_TIMEOUT"}},
		{DecisionID: "dec_sig", Result: "deny", Status: 403, Codes: []string{"MANIFEST_SIGNATURE_INVALID"}},
	}
	r := Run(context.Background(), e, logged)
	if r.Events != 3 || r.Replayed != 1 || r.Skipped != 1 || r.BaselineErrors != 1 || r.BaselineByCode["POLICY_TIMEOUT"] != 1 ||
		len(r.Flips) != 0 || r.AllowToDeny != 0 || r.Unchanged != 0 || len(r.Errors) != 1 || r.ErrorsByCode["POLICY_TIMEOUT"] != 1 {
		t.Fatalf("report %+v", r)
	}
	if ee := r.Errors[0]; ee.DecisionID != "dec_slow" || ee.Before != "allow" || ee.Code != "POLICY_TIMEOUT" {
		t.Fatalf("error %+v", ee)
	}
	var out bytes.Buffer
	r.Print(&out)
	for _, want := range []string{"allow → deny 0, deny → allow 0",
		"could not evaluate: candidate 1 (POLICY_TIMEOUT 1), logged decision 1 (POLICY_TIMEOUT 1) (not flips)", "NOT EVALUATED"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("printed:\n%s\nwant %q", out.String(), want)
		}
	}
}

// flaky times out on the first `fails` calls, then allows.
type flaky struct{ calls, fails int }

func (f *flaky) Decide(context.Context, map[string]any) (policy.Decision, error) {
	f.calls++
	if f.calls <= f.fails {
		return policy.Decision{}, &policy.Error{Code: api.CodePolicyTimeout, Err: errors.New("evaluation exceeded 1ms")}
	}
	return policy.Decision{Allow: true}, nil
}

// TestReplayRetriesATimeoutOnce: one timeout is retried and the decision
// compared; two in a row are an evaluation error; another error is not
// retried.
func TestReplayRetriesATimeoutOnce(t *testing.T) {
	t.Parallel()
	ev := []decisionlog.Event{{DecisionID: "dec_a", Input: map[string]any{}, PolicyResult: "allow"}}
	once := &flaky{fails: 1}
	if r := Run(context.Background(), once, ev); r.Unchanged != 1 || len(r.Errors) != 0 || once.calls != 2 {
		t.Fatalf("one timeout: %+v, %d calls", r, once.calls)
	}
	twice := &flaky{fails: 2}
	if r := Run(context.Background(), twice, ev); len(r.Errors) != 1 || len(r.Flips) != 0 || twice.calls != 2 {
		t.Fatalf("two timeouts: %+v, %d calls", r, twice.calls)
	}
	failing := deciderFunc(func() error { return &policy.Error{Code: api.CodePolicyEvaluationFailed, Err: errors.New("x")} })
	if r := Run(context.Background(), failing, ev); len(r.Errors) != 1 || r.Errors[0].Code != "POLICY_EVALUATION_FAILED" || *failing.calls != 1 {
		t.Fatalf("an evaluation error: %+v", r)
	}
}

type errDecider struct {
	err   func() error
	calls *int
}

func deciderFunc(err func() error) errDecider { return errDecider{err, new(int)} }

func (d errDecider) Decide(context.Context, map[string]any) (policy.Decision, error) {
	*d.calls++
	return policy.Decision{}, d.err()
}
