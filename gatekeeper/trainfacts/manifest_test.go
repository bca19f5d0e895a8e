package trainfacts_test

import (
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/policies"
)

// shippedData is the shipped bundle's data document, decoded afresh.
func shippedData(t *testing.T) map[string]any {
	t.Helper()
	b, _, err := policy.ReadFS(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	return b.Data
}

// withManifestConfig is data with data.ito.config.manifest replaced by cfg.
func withManifestConfig(t *testing.T, data map[string]any, cfg string) map[string]any {
	t.Helper()
	var c map[string]any
	if err := json.Unmarshal([]byte(cfg), &c); err != nil {
		t.Fatal(err)
	}
	ito := maps.Clone(data["ito"].(map[string]any))
	config := maps.Clone(ito["config"].(map[string]any))
	config["manifest"] = c
	ito["config"] = config
	out := maps.Clone(data)
	out["ito"] = ito
	return out
}

// A field list the check could not apply is refused at activation: a field
// whose kind no formula and no kind_values list defines could never pass
// (every manifest denied), and a malformed list would be judged otherwise
// by Go than by the reference.
func TestManifestFieldsRefused(t *testing.T) {
	data := shippedData(t)
	for cfg, want := range map[string]string{
		`{"fields": [{"path": ["model", "layers"], "kind": "counts"}]}`:        `kind "counts", neither a formula kind nor one of kind_values`,
		`{"fields": [{"path": "model/layers", "kind": "count"}]}`:              "manifest.fields[0] has no kind or no path",
		`{"fields": [{"path": ["model", 1], "kind": "count"}]}`:                "manifest.fields[0] has a path step that is not a string",
		`{"fields": {"path": ["model"], "kind": "count"}}`:                     "manifest.fields is not an array",
		`{"fields": [], "kind_values": {"flavor": "plain"}}`:                   "manifest.kind_values[flavor] is not an array",
		`{"fields": [], "kind_values": {"flavor": [["plain"]]}}`:               "manifest.kind_values[flavor] holds a value that is not a string",
		`{"fields": [{"path": ["model"], "kind": "count"}], "kind_values": 3}`: "kind_values is not an object",
	} {
		_, err := trainfacts.New(withManifestConfig(t, data, cfg))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", cfg, err, want)
		}
	}
}

// The field check of a train.create: the fields whose value is not of their
// kind, in the bundle's order, each {path, kind} as the bundle lists it;
// numbers compare by value (8.0 is a count, 1.0 a ZeRO stage), an absent
// optional field passes, a value below something that is not an object is
// absent; other actions carry no field check.
func TestManifestFieldCheck(t *testing.T) {
	m, err := trainfacts.New(shippedData(t))
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, edit func(m map[string]any)) []string {
		t.Helper()
		doc := baseDoc(t)
		if edit != nil {
			edit(doc["manifest"].(map[string]any))
		}
		facts, err := m.Compute(doc)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		fm, ok := facts["manifest"].(map[string]any)
		if !ok {
			t.Fatalf("%s: no manifest facts in %v", name, facts)
		}
		var out []string
		for _, f := range fm["invalid_fields"].([]any) {
			o := f.(map[string]any)
			var steps []string
			for _, s := range o["path"].([]any) {
				steps = append(steps, s.(string))
			}
			out = append(out, strings.Join(steps, "/")+":"+o["kind"].(string))
		}
		return out
	}
	obj := func(m map[string]any, k string) map[string]any { return m[k].(map[string]any) }
	for _, tc := range []struct {
		name string
		edit func(m map[string]any)
		want []string
	}{
		{"the base manifest", nil, nil},
		{"numbers by value", func(m map[string]any) {
			obj(m, "hardware")["nodes"] = json.Number("8.0")
			obj(m, "parallelism")["zero_stage"] = json.Number("1.0")
			obj(m, "parallelism")["pipeline_split"] = map[string]any{"stage_layers": []any{json.Number("4"), json.Number("0")}}
		}, nil},
		{"ill-typed values", func(m map[string]any) {
			obj(m, "model")["layers"] = json.Number("1.5")
			obj(m, "hardware")["gpu_type"] = ""
			obj(m, "parallelism")["zero_stage"] = json.Number("4")
			obj(m, "parallelism")["precision"] = "fp64"
			obj(m, "parallelism")["pipeline_split"] = map[string]any{"stage_layers": []any{json.Number("-1")}}
			m["data"] = []any{"not an object"}
		}, []string{"model/layers:count", "hardware/gpu_type:string", "parallelism/precision:precision",
			"parallelism/zero_stage:zero_stage", "data:datasets", "parallelism/pipeline_split/stage_layers:layer_counts"}},
		{"below a value that is not an object", func(m map[string]any) {
			m["hardware"] = "8 nodes"
		}, []string{"hardware/nodes:count", "hardware/gpus_per_node:count", "hardware/gpu_type:string",
			"hardware/fabric:string", "hardware/region:string"}},
		{"no objective.stage, stages not an array", func(m map[string]any) {
			delete(obj(m, "objective"), "stage")
			m["stages"] = json.Number("5")
		}, []string{"objective/stage:stage", "stages:array"}},
		// each stage's settings as the stage will be judged, in
		// kind_values.stage order; model.layers, wrong in the manifest and
		// so in midtrain's and dpo's effective manifests, is named once (for
		// the manifest), and sft's settings that set it right name nothing;
		// a key that is not a stage is not looked at
		{"stage settings", func(m map[string]any) {
			obj(m, "model")["layers"] = json.Number("0")
			m["stage_settings"] = map[string]any{
				"sft":           map[string]any{"parallelism": json.Number("2"), "model": map[string]any{"layers": json.Number("32")}},
				"midtrain":      map[string]any{"objective": map[string]any{"sequence_length": "x"}},
				"dpo":           "fast",
				"ghp_notastage": json.Number("5"),
			}
		}, []string{"model/layers:count", "stage_settings/midtrain/objective/sequence_length:count",
			"stage_settings/sft/parallelism/tensor:count", "stage_settings/sft/parallelism/pipeline:count",
			"stage_settings/sft/parallelism/precision:precision", "stage_settings/dpo:optional_object"}},
	} {
		if got := check(tc.name, tc.edit); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: invalid fields %q, want %q", tc.name, got, tc.want)
		}
	}
	cancel := baseDoc(t)
	cancel["request"].(map[string]any)["action"] = "train.cancel"
	facts, err := m.Compute(cancel)
	if err != nil {
		t.Fatal(err)
	}
	if _, has := facts["manifest"]; has {
		t.Errorf("train.cancel carries a field check: %v", facts["manifest"])
	}
}

// The credential patterns must be an array too (the reader's arr, shared
// with the field list): an object is refused at activation, naming it.
func TestCredentialPatternsNotAnArrayRefused(t *testing.T) {
	data := shippedData(t)
	ito := maps.Clone(data["ito"].(map[string]any))
	config := maps.Clone(ito["config"].(map[string]any))
	dataCfg := maps.Clone(config["data"].(map[string]any))
	creds := maps.Clone(dataCfg["credentials"].(map[string]any))
	creds["value_patterns"] = map[string]any{"kind": "aws", "all": []any{"AKIA"}}
	dataCfg["credentials"], config["data"], ito["config"] = creds, dataCfg, config
	edited := maps.Clone(data)
	edited["ito"] = ito
	_, err := trainfacts.New(edited)
	if want := "credentials.value_patterns is not an array"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one containing %q", err, want)
	}
}
