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
			ev.PolicyCodes = append(ev.PolicyCodes, v.Code)
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
