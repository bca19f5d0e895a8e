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

	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/open-policy-agent/opa/v1/rego"
)

// FactsReferenceQuery is the bundle's Rego reference of the training
// facts: what Go's facts model (gatekeeper/trainfacts) computes, by the
// bundle's own formulas (policies/ito/facts).
const FactsReferenceQuery = "data.ito.facts.reference"

// sampleNow is the clock of the sample inputs (2026-01-01T00:00:00Z, Unix
// seconds): fixed, so that a bundle is judged alike on every activation.
const sampleNow = 1767225600

// checkFactsReference evaluates the bundle's Rego reference of the facts
// on sample inputs and compares it with model's facts, byte for byte as
// JSON: the identity that TestFactsMatchReference holds for the embedded
// bundle, checked at activation for whatever tables a bundle ships (an
// operator's own GPU, fabric or storage rows). The samples are the
// bundle's own sample manifests (data.ito.config.facts.samples), each moved
// onto a row of the bundle's gpus, fabrics and storage tables so that every
// row is on one (a row's figures reach the facts only on a manifest that
// names it; factsSamples), each with an entitlement that prices, bounds and
// measures it (sampleInput). An error
// in both is agreement (the decision would fail closed either way); an
// undefined reference is a difference. The first difference is returned,
// naming the sample and the path of the first value that differs.
//
// The verdict does not depend on ctx's cancellation (compiling the bundle
// does not either): a cancel is not a difference, and an activation
// started just before a shutdown completes as before. The samples are a
// fixed set; Rego evaluation ends.
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
		rs, refErr := ref.Eval(ctx, rego.EvalParsedInput(parsed))
		switch {
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

// factsSamples are checkFactsReference's inputs: a train.create of each
// manifest of the bundle's data.ito.config.facts.samples (by name; cycled
// when a table is longer), the i-th moved onto row i of the gpus, fabrics
// and storage tables of data (rows sorted by name) where the table has
// one, so that every row is on a sample. A bundle without samples cannot
// be checked: an error.
func factsSamples(data map[string]any) ([]factsSample, error) {
	ito, _ := data["ito"].(map[string]any)
	config, _ := ito["config"].(map[string]any)
	facts, _ := config["facts"].(map[string]any)
	manifests, _ := facts["samples"].(map[string]any)
	names := sortedKeys(manifests)
	if len(names) == 0 {
		return nil, errors.New("data.ito.config.facts.samples names no sample manifest to check the facts reference on")
	}
	tables, _ := ito["tables"].(map[string]any)
	rows := func(table string) []string {
		t, _ := tables[table].(map[string]any)
		return sortedKeys(t)
	}
	gpus, fabrics, tiers := rows("gpus"), rows("fabrics"), rows("storage")
	out := make([]factsSample, 0, max(len(names), len(gpus), len(fabrics), len(tiers)))
	for i := range cap(out) {
		name := names[i%len(names)]
		doc, ok := deepCopyJSON(manifests[name]).(map[string]any) // changed below; bundle data is shared
		if !ok {
			return nil, fmt.Errorf("data.ito.config.facts.samples.%s is not a manifest object", name)
		}
		on, tier := []string{}, ""
		if hw, ok := doc["hardware"].(map[string]any); ok {
			if i < len(gpus) {
				hw["gpu_type"] = gpus[i]
				on = append(on, "gpu_type "+gpus[i])
			}
			if i < len(fabrics) {
				hw["fabric"] = fabrics[i]
				on = append(on, "fabric "+fabrics[i])
			}
		}
		if ck, ok := doc["checkpoint"].(map[string]any); ok && i < len(tiers) {
			tier = tiers[i]
			ck["storage_tier"] = tier
			on = append(on, "storage_tier "+tier)
		}
		label := name
		if len(on) > 0 {
			label += " on " + strings.Join(on, ", ")
		}
		out = append(out, factsSample{name: label, input: sampleInput(doc, tier)})
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

// deepCopyJSON copies a JSON-shaped value (objects and arrays; other
// values are immutable).
func deepCopyJSON(x any) any {
	switch v := x.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = deepCopyJSON(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = deepCopyJSON(e)
		}
		return out
	}
	return x
}

// sampleInput is a train.create of doc at sampleNow, with an entitlement
// that prices the run (a non-integral USD price), ends its term in 30 days,
// names a region and a storage quota and, with a tier, carries telemetry
// that measures that tier (the checkpoint model's telemetry path).
func sampleInput(doc map[string]any, tier string) map[string]any {
	n := func(s string) json.Number { return json.Number(s) }
	ent := map[string]any{
		"price_per_gpu_hour_usd": n("2.35"), "iat": n(fmt.Sprint(sampleNow - 60)),
		"term":   map[string]any{"end": n(fmt.Sprint(sampleNow + 30*86400))},
		"region": "us-east-1", "storage_quota_gib": n("102400"),
	}
	if tier != "" {
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
	return fmt.Sprintf("%s (Go %v, reference %v)", path, a, b)
}
