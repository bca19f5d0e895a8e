package policy_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/policies"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/util"
)

// evalInputValue is what rego.EvalInput evaluates for x: its JSON-shaped
// copy, converted.
func evalInputValue(x any) (ast.Value, error) {
	if err := util.RoundTripFast(&x); err != nil {
		return nil, err
	}
	return ast.InterfaceToValue(x)
}

// goTyped are values of the Go types the input builder and token
// verifiers write (int, int64, float64, typed slices and structs), which
// rego.EvalInput turns into JSON values first.
var goTyped = []any{
	int(7), int64(-3), int64(math.MaxInt64), uint64(math.MaxUint64), float64(2.49), float64(1e21), float64(1e-7),
	float64(3), float32(0.1), []string{"a", "b"}, []int{1, 2}, map[string]string{"k": "v"},
	struct {
		A int    `json:"a"`
		B string `json:"b,omitempty"`
	}{A: 1}, map[string]any(nil), []any(nil), json.Number("1e400"),
}

// TestInputValueIsEvalInput holds the engine's input conversion to what
// rego.EvalInput makes of the same document, on every fixture and limits
// input with its training facts, and on seeded mutations of them that
// write number texts, Go-typed values and nils.
func TestInputValueIsEvalInput(t *testing.T) {
	b, _, err := policy.ReadFS(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	model, err := trainfacts.New(b.Data)
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, name string, in map[string]any) {
		t.Helper()
		want, wantErr := evalInputValue(in)
		got, gotErr := policy.InputValue(in)
		switch {
		case wantErr != nil && gotErr != nil:
			return
		case wantErr != nil || gotErr != nil:
			t.Fatalf("%s: EvalInput error %v, inputValue error %v", name, wantErr, gotErr)
		case got.Compare(want) != 0 || got.String() != want.String():
			t.Fatalf("%s: values differ\n got: %v\nwant: %v", name, got, want)
		}
	}
	bases := baseInputs(t)
	names := sortedKeys(bases)
	for _, name := range names {
		check(t, name, admission.WithFacts(deepCopy(t, bases[name]), model))
	}
	values := append(append(append([]any{}, mutationValues...), numberTexts...), goTyped...)
	rng := rand.New(rand.NewPCG(24, 2027))
	n := 2000
	if raceDetector || testing.Short() {
		n = 200
	}
	for j := range n {
		name := names[rng.IntN(len(names))]
		in := admission.WithFacts(deepCopy(t, bases[name]), model)
		var ops []string
		for range 1 + rng.IntN(3) {
			ops = append(ops, mutateWith(rng, in, values))
		}
		check(t, fmt.Sprintf("mutation %d of %s (%v)", j, name, ops), in)
	}
	// Go values the documents hold as they are, not only after decoding
	for _, v := range goTyped {
		check(t, fmt.Sprintf("%T", v), map[string]any{"x": v, "y": []any{v}})
	}
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	if _, err := policy.InputValue(cyclic); err == nil {
		t.Fatal("a cyclic input converted")
	}
}
