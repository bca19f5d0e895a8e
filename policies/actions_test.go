package policies_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/policies"
)

// TestActionTableMatchesAPI: the bundle's action table (data.ito.config.
// actions, read by the gates) and the input schema's action enums say what
// api.Actions says, so the Go contract and the policy never disagree on
// which actions exist and what each carries.
func TestActionTableMatchesAPI(t *testing.T) {
	raw, err := fs.ReadFile(policies.Bundle(), "ito/config/data.json")
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Effect          string `json:"effect"`
		State           string `json:"state"`
		Manifest        bool   `json:"manifest"`
		Stage           bool   `json:"stage"`
		CheckpointStep  bool   `json:"checkpoint_step"`
		EvalReports     bool   `json:"eval_reports"`
		ReleasesBooking bool   `json:"releases_booking"`
	}
	var doc struct {
		Actions map[string]row `json:"actions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]row{}
	var names []string
	for _, s := range api.Actions() {
		want[string(s.Action)] = row{Effect: s.Effect.String(), State: string(s.State), Manifest: s.Manifest,
			Stage: s.Stage, CheckpointStep: s.CheckpointStep, EvalReports: s.EvalReports, ReleasesBooking: s.ReleasesBooking}
		names = append(names, string(s.Action))
	}
	for a, w := range want {
		if got, ok := doc.Actions[a]; !ok || got != w {
			t.Errorf("data.ito.config.actions[%q] = %+v (present %v), want %+v", a, got, ok, w)
		}
	}
	for a := range doc.Actions {
		if _, ok := want[a]; !ok {
			t.Errorf("data.ito.config.actions[%q] is no api action", a)
		}
	}

	schema, err := os.ReadFile(filepath.Join("..", "schemas", "input.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties struct {
			Request struct {
				Properties struct {
					Action struct{ Enum []string } `json:"action"`
				} `json:"properties"`
			} `json:"request"`
			Confirmation struct {
				Properties struct {
					Act struct{ Enum []string } `json:"act"`
				} `json:"properties"`
			} `json:"confirmation"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	for what, enum := range map[string][]string{
		"request.action":   s.Properties.Request.Properties.Action.Enum,
		"confirmation.act": s.Properties.Confirmation.Properties.Act.Enum,
	} {
		got := slices.Sorted(slices.Values(enum))
		if !slices.Equal(got, names) {
			t.Errorf("schemas/input.json %s enum %v, want the api actions %v", what, got, names)
		}
	}
}
