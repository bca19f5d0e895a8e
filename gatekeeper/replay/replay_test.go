package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"

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
