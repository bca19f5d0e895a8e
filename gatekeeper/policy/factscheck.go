package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/internal/jsonvalue"
	"github.com/open-policy-agent/opa/v1/rego"
)

// FactsReferenceQuery is the bundle's Rego reference of the training
// facts: what Go's facts model (gatekeeper/trainfacts) computes, by the
// bundle's own formulas (policies/ito/facts).
const FactsReferenceQuery = "data.ito.facts.reference"

// factsCheckTimeout bounds the reference's evaluation on one sample (~12
// ms on the embedded bundle): a bundle whose reference runs longer is
// refused rather than holding its activation.
const factsCheckTimeout = 10 * time.Second

// sampleNow is the clock of the sample inputs (2026-01-01T00:00:00Z, Unix
// seconds): fixed, so that a bundle is judged alike on every activation.
const sampleNow = 1767225600

// checkFactsReference evaluates the bundle's Rego reference of the facts
// on sample inputs and compares it with model's facts, byte for byte as
// JSON: the identity that TestFactsMatchReference holds for the embedded
// bundle, checked at activation for whatever tables a bundle ships (an
// operator's own GPU, fabric or storage rows, an edited formula). The
// inputs are built from the bundle's own sample manifests
// (data.ito.config.facts.samples): every table row, the telemetry path,
// the credential scan, the field check and a stage advance
// (factsSamples). An error in both is agreement (the decision would fail
// closed either way); an undefined reference is a difference. The first
// difference is returned, naming the sample and the path of the first
// value that differs.
//
// The verdict does not depend on ctx's cancellation (compiling the bundle
// does not either): a cancel is not a difference, and an activation
// started just before a shutdown completes as before. Each sample's
// evaluation has its own bound (factsCheckTimeout).
func checkFactsReference(ctx context.Context, cb *compiledBundle, model *trainfacts.Model, data map[string]any) error {
	ctx = context.WithoutCancel(ctx)
	ref, err := cb.prepare(ctx, "facts := "+FactsReferenceQuery)
	if err != nil {
		return fmt.Errorf("prepare %s: %w", FactsReferenceQuery, err)
	}
	samples, err := factsSamples(data)
	if err != nil {
		return err
	}
	for _, s := range samples {
		got, goErr := model.Compute(s.input)
		parsed, err := inputValue(s.input)
		if err != nil {
			return fmt.Errorf("sample %s: %w", s.name, err)
		}
		evalCtx, cancel := context.WithTimeout(ctx, factsCheckTimeout)
		rs, refErr := ref.Eval(evalCtx, rego.EvalParsedInput(parsed))
		timedOut := evalCtx.Err() != nil
		cancel()
		switch {
		case timedOut:
			return fmt.Errorf("sample %s: %s did not finish within %s", s.name, FactsReferenceQuery, factsCheckTimeout)
		case refErr != nil && goErr != nil:
			continue
		case refErr != nil:
			return fmt.Errorf("sample %s: the reference fails (%v), Go computes facts", s.name, refErr)
		case goErr != nil:
			return fmt.Errorf("sample %s: Go fails (%v), the reference computes facts", s.name, goErr)
		case len(rs) != 1:
			return fmt.Errorf("sample %s: %s is undefined", s.name, FactsReferenceQuery)
		}
		if path, ok := sameJSON(got, rs[0].Bindings["facts"]); !ok {
			return fmt.Errorf("sample %s: Go's facts differ from %s at %s", s.name, FactsReferenceQuery, path)
		}
	}
	return nil
}

type factsSample struct {
	name  string
	input map[string]any
}

// factsSamples are checkFactsReference's inputs, from the bundle's
// sample manifests (data.ito.config.facts.samples, by name):
//   - the rows: a train.create of a sample (cycled) moved onto row i of
//     the gpus, fabrics and storage tables of data (rows sorted by name),
//     without telemetry, so that every row's figures reach the facts;
//   - the features: each sample as written, with telemetry for its own
//     storage tier (the telemetry path), a secret-named key (the
//     credential scan) and an ill-typed hardware.region (the field check);
//   - the advances: each sample as a train.stage.advance into a stage
//     whose settings change the objective, the world size and the layout.
//
// A bundle without samples, or a sample without hardware and checkpoint
// objects (it could not carry a row), cannot be checked: an error.
func factsSamples(data map[string]any) ([]factsSample, error) {
	ito, _ := data["ito"].(map[string]any)
	config, _ := ito["config"].(map[string]any)
	facts, _ := config["facts"].(map[string]any)
	manifests, _ := facts["samples"].(map[string]any)
	names := sortedKeys(manifests)
	if len(names) == 0 {
		return nil, errors.New("data.ito.config.facts.samples names no sample manifest to check the facts reference on")
	}
	// a fresh copy of a sample, to change (bundle data is shared)
	sample := func(name string) (doc, hw, ck map[string]any, err error) {
		doc, _ = jsonvalue.Clone(manifests[name]).(map[string]any)
		hw, _ = doc["hardware"].(map[string]any)
		ck, _ = doc["checkpoint"].(map[string]any)
		if hw == nil || ck == nil {
			return nil, nil, nil, fmt.Errorf("data.ito.config.facts.samples.%s is not a manifest with hardware and checkpoint objects", name)
		}
		return doc, hw, ck, nil
	}
	tables, _ := ito["tables"].(map[string]any)
	rows := func(table string) []string {
		t, _ := tables[table].(map[string]any)
		return sortedKeys(t)
	}
	gpus, fabrics, tiers := rows("gpus"), rows("fabrics"), rows("storage")
	var out []factsSample
	for i := range max(len(names), len(gpus), len(fabrics), len(tiers)) {
		name := names[i%len(names)]
		doc, hw, ck, err := sample(name)
		if err != nil {
			return nil, err
		}
		var on []string
		if i < len(gpus) {
			hw["gpu_type"] = gpus[i]
			on = append(on, "gpu_type "+gpus[i])
		}
		if i < len(fabrics) {
			hw["fabric"] = fabrics[i]
			on = append(on, "fabric "+fabrics[i])
		}
		if i < len(tiers) {
			ck["storage_tier"] = tiers[i]
			on = append(on, "storage_tier "+tiers[i])
		}
		label := name
		if len(on) > 0 {
			label += " on " + strings.Join(on, ", ")
		}
		out = append(out, factsSample{name: label, input: sampleInput(doc, false)})
	}
	for _, name := range names {
		doc, hw, _, err := sample(name)
		if err != nil {
			return nil, err
		}
		hw["region"] = json.Number("5")
		doc["sample_credentials"] = map[string]any{"api_token": "0123456789abcdefghijklmnopqrstuv"}
		out = append(out, factsSample{name: name + " with telemetry, a secret-named key and an ill-typed field",
			input: sampleInput(doc, true)})
	}
	for _, name := range names {
		doc, _, _, err := sample(name)
		if err != nil {
			return nil, err
		}
		doc["stage_settings"] = map[string]any{
			"long_context": map[string]any{
				"objective":   map[string]any{"sequence_length": json.Number("32768"), "global_batch_size": json.Number("128")},
				"hardware":    map[string]any{"nodes": json.Number("2")},
				"parallelism": map[string]any{"context": json.Number("4"), "pipeline_split": map[string]any{"loss_stage": true}},
			},
		}
		in := sampleInput(doc, false)
		in["request"] = map[string]any{"action": trainfacts.StageAction, "stage": "long_context"}
		out = append(out, factsSample{name: name + " advancing into long_context", input: in})
	}
	return out, nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// sampleInput is a train.create of doc at sampleNow, with an entitlement
// that prices the run (a non-integral USD price), ends its term in 30 days,
// names a region and a storage quota and, with telemetry, measures the
// interruption rate and the write bandwidth of doc's storage tier.
func sampleInput(doc map[string]any, telemetry bool) map[string]any {
	n := func(s string) json.Number { return json.Number(s) }
	ent := map[string]any{
		"price_per_gpu_hour_usd": n("2.35"), "iat": n(fmt.Sprint(sampleNow - 60)),
		"term":   map[string]any{"end": n(fmt.Sprint(sampleNow + 30*86400))},
		"region": "us-east-1", "storage_quota_gib": n("102400"),
	}
	ck, _ := doc["checkpoint"].(map[string]any)
	if tier, ok := ck["storage_tier"].(string); ok && telemetry {
		ent["telemetry"] = map[string]any{
			"measured_at": n(fmt.Sprint(sampleNow - 600)), "window_seconds": n("604800"),
			"interruptions_per_gpu_hour":             n("0.0002"),
			"checkpoint_write_gbytes_per_s_per_node": map[string]any{tier: n("0.75")},
		}
	}
	return map[string]any{
		"request":     map[string]any{"action": "train.create"},
		"manifest":    doc,
		"entitlement": ent,
		"now":         n(fmt.Sprint(sampleNow)),
	}
}

// sameJSON reports whether a and b have the same JSON text, and if not the
// path of the first value where they differ ("" for the whole).
func sameJSON(a, b any) (string, bool) {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	if errA == nil && errB == nil && string(ja) == string(jb) {
		return "", true
	}
	va, errA := decodeNumbers(ja)
	vb, errB := decodeNumbers(jb)
	if errA != nil || errB != nil {
		return "(not JSON)", false
	}
	return firstDifference(va, vb, "facts"), false
}

// decodeNumbers decodes JSON keeping each number's text (json.Number).
func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func firstDifference(a, b any, path string) string {
	ma, okA := a.(map[string]any)
	mb, okB := b.(map[string]any)
	if okA && okB {
		keys := make([]string, 0, len(ma)+len(mb))
		for k := range ma {
			keys = append(keys, k)
		}
		for k := range mb {
			if _, ok := ma[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			va, inA := ma[k]
			vb, inB := mb[k]
			switch {
			case !inA:
				return fmt.Sprintf("%s.%s (only in the reference: %v)", path, k, vb)
			case !inB:
				return fmt.Sprintf("%s.%s (only in Go: %v)", path, k, va)
			case !reflect.DeepEqual(va, vb):
				return firstDifference(va, vb, path+"."+k)
			}
		}
	}
	la, okA := a.([]any)
	lb, okB := b.([]any)
	if okA && okB && len(la) == len(lb) {
		for i := range la {
			if !reflect.DeepEqual(la[i], lb[i]) {
				return firstDifference(la[i], lb[i], fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	return fmt.Sprintf("%s (Go %v, reference %v)", path, a, b)
}
