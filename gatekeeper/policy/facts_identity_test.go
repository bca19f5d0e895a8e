package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/policies"
)

// factsMutations is how many seeded mutations TestFactsMatchReference
// checks on top of every fixture and the limits manifests: half with the
// values of TestDecisionsMatchBaseline's mutations, half with number texts
// OPA reads in more than one way added (1.0, 1e1, -0, 2^63, ...).
const (
	factsMutations = 4000
	sampledFacts   = 400
)

// numberTexts are JSON numbers whose text OPA's arithmetic reads in more
// than one way: integral decimals (an int to Atoi64, a float to the type
// checker), exponents (an exact integer to big.Int, not to Atoi64), the
// int32 window's edges, 2^63 (lib.ceil_div's bound) and beyond 64 bits;
// and strings the credential patterns match only without case (the long s
// folds onto s), for the scan's keywords.
var numberTexts = []any{
	json.Number("1.0"), json.Number("8.0"), json.Number("2.0"), json.Number("0.0"), json.Number("-0"),
	json.Number("1e1"), json.Number("8e0"), json.Number("4096.0"), json.Number("1E3"), json.Number("2.5e3"),
	json.Number("2147483647"), json.Number("2147483648"), json.Number("9223372036854775807"),
	json.Number("9223372036854775808"), json.Number("18446744073709551617"), json.Number("1e30"),
	json.Number("0.1"), json.Number("0.30000000000000004"), json.Number("3.3333333333333333"),
	json.Number("12"), json.Number("24"), json.Number("96"), json.Number("5"), json.Number("6"), json.Number("32"),
	json.Number("8192"), json.Number("131072"), json.Number("70553706496"), json.Number("0.25"),
	"dualpipe", "zero_bubble", "interleaved", "1f1b", "megatron", "nemo", "deepspeed", "torchtitan",
	"s3://bucket/x", "lustre://fs/x", "gs://b/x", "file:///x", "lustre", "object-store-slow", "us-west-2",
	"https://b.example/x?ſig=abc&ſe=2026", "Bearer ſ0123456789abcdefghijklmnop", "ghp_ſ0123456789abcdefghijklmnopqrstuvwxyz",
	"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.x", "-----BEGIN PRIVATE KEY-----", "data:;base64,QQ==",
	true, false, nil, map[string]any{}, []any{},
}

// TestFactsMatchReference holds Go's training facts (gatekeeper/trainfacts,
// over the bundle's data) byte-identical to the bundle's Rego reference
// (data.ito.facts.reference, evaluated with strict built-in errors as the
// server evaluates) on every fixture, the manifests at the schema's limits
// and seeded mutations of them; an input the reference fails on must fail
// in Go too. Every input is there also as a train.stage.advance into a
// long_context stage with its own settings (withStageAdvances), whose
// facts are the stage's effective manifest's. The first difference fails
// with the input's mutations. Every input is there also with a telemetry
// claim in its entitlement (withTelemetry), so the mutations reach the
// claim's every field.
func TestFactsMatchReference(t *testing.T) {
	ctx := context.Background()
	b, _, err := policy.ReadFS(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	model, err := trainfacts.New(b.Data)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := rego.New(rego.Query("data.ito.facts.reference"), rego.ParsedBundle("itogate", b),
		rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, name string, in map[string]any) {
		t.Helper()
		delete(in, "facts")
		rs, refErr := ref.Eval(ctx, rego.EvalInput(in))
		got, goErr := model.Compute(in)
		switch {
		case refErr != nil && goErr != nil:
			return
		case refErr != nil || goErr != nil:
			t.Fatalf("%s: reference error %v, Go error %v", name, refErr, goErr)
		case len(rs) != 1:
			t.Fatalf("%s: reference undefined", name)
		}
		want, err := json.Marshal(rs[0].Expressions[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		gotJSON, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		if string(gotJSON) != string(want) {
			t.Fatalf("%s: facts differ\n  Go: %s\n ref: %s", name, gotJSON, want)
		}
	}
	bases := withStageAdvances(t, withTelemetry(t, baseInputs(t)))
	names := sortedKeys(bases)
	for _, name := range names {
		check(t, name, deepCopy(t, bases[name]))
	}
	// two sets of mutations, checked in parallel: the baseline's values, and
	// those with the number texts added
	n := factsMutations / 2
	if raceDetector || testing.Short() {
		n = sampledFacts / 2
	}
	for i, values := range [][]any{mutationValues, append(append([]any{}, mutationValues...), numberTexts...)} {
		t.Run(fmt.Sprintf("values-%d", i), func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			rng := rand.New(rand.NewPCG(24, uint64(2026+i)))
			for j := range n {
				name := names[rng.IntN(len(names))]
				in := deepCopy(t, bases[name])
				delete(in, "facts")
				var ops []string
				for range 1 + rng.IntN(3) {
					ops = append(ops, mutateWith(rng, in, values))
				}
				check(t, fmt.Sprintf("mutation %d of %s (%s)", j, name, strings.Join(ops, "; ")), in)
			}
			t.Logf("%d mutations: Go's facts are the reference's (%s)", n, time.Since(start).Round(time.Millisecond))
		})
	}
}

// withStageAdvances is bases and, for each, "<name> advance": the input
// as a train.stage.advance into long_context whose stage_settings change
// the objective, the world size and the layout (nested pipeline_split
// included), and leave sft's alone.
func withStageAdvances(t *testing.T, bases map[string]map[string]any) map[string]map[string]any {
	t.Helper()
	out := make(map[string]map[string]any, 2*len(bases))
	for name, in := range bases {
		out[name] = in
		adv := deepCopy(t, in)
		req, _ := adv["request"].(map[string]any)
		req["action"], req["stage"] = trainfacts.StageAction, "long_context"
		m, _ := adv["manifest"].(map[string]any)
		m["stage_settings"] = map[string]any{
			"long_context": map[string]any{
				"objective":   map[string]any{"sequence_length": json.Number("32768"), "global_batch_size": json.Number("128")},
				"hardware":    map[string]any{"nodes": json.Number("2")},
				"parallelism": map[string]any{"context": json.Number("4"), "pipeline_split": map[string]any{"loss_stage": true}},
			},
			"sft": map[string]any{"objective": map[string]any{"sequence_length": json.Number("4096")}},
		}
		out[name+" advance"] = adv
	}
	return out
}

// withTelemetry is bases and, for each, "<name> telemetry": the input
// whose entitlement carries a telemetry claim the checkpoint model uses
// (fresh, within the bundle's bounds, naming two tiers).
func withTelemetry(t *testing.T, bases map[string]map[string]any) map[string]map[string]any {
	t.Helper()
	out := make(map[string]map[string]any, 2*len(bases))
	for name, in := range bases {
		out[name] = in
		tel := deepCopy(t, in)
		ent, _ := tel["entitlement"].(map[string]any)
		now, _ := tel["now"].(json.Number).Int64()
		ent["telemetry"] = map[string]any{
			"measured_at": json.Number(fmt.Sprint(now - 600)), "window_seconds": json.Number("604800"),
			"interruptions_per_gpu_hour": json.Number("0.0002"),
			"checkpoint_write_gbytes_per_s_per_node": map[string]any{
				"s3-standard": json.Number("0.75"), "lustre": json.Number("3.5"),
			},
		}
		out[name+" telemetry"] = tel
	}
	return out
}
