package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/policies"
)

// TestDecisionsMatchBaseline evaluates the embedded bundle and a baseline
// bundle (ITOGATE_BASELINE_POLICIES: a policies/ tree, e.g. an older commit's,
// see bench/identical.sh) on every fixture manifest, the manifests at the
// schema's limits and ITOGATE_BASELINE_MUTATIONS (default 4000) seeded
// random mutations of them, and fails on the first decision, log mask or
// error code that differs. It guards rewrites of the policy that must not
// change a decision (performance work); skipped without a baseline.
func TestDecisionsMatchBaseline(t *testing.T) {
	dir := os.Getenv("ITOGATE_BASELINE_POLICIES")
	if dir == "" {
		t.Skip("ITOGATE_BASELINE_POLICIES not set (bench/identical.sh sets it)")
	}
	n := 4000
	if s := os.Getenv("ITOGATE_BASELINE_MUTATIONS"); s != "" {
		if _, err := fmt.Sscan(s, &n); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	current, err := policy.New(ctx, policy.Options{Bundle: policies.Bundle(), Deadline: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// The baseline is an older tree with its own package names (the
	// required-rules inventory is this tree's): compare decisions only.
	baseline, err := policy.New(ctx, policy.Options{Bundle: os.DirFS(dir), Deadline: 10 * time.Minute, SkipRequiredRules: true})
	if err != nil {
		t.Fatal(err)
	}
	bases := baseInputs(t)
	for _, name := range sortedKeys(bases) {
		compareDecisions(t, current, baseline, name, bases[name])
	}
	rng := rand.New(rand.NewPCG(17, 2026))
	names := sortedKeys(bases)
	allows := 0
	for i := range n {
		name := names[rng.IntN(len(names))]
		in := deepCopy(t, bases[name])
		var ops []string
		for range 1 + rng.IntN(3) {
			ops = append(ops, mutate(rng, in))
		}
		if compareDecisions(t, current, baseline, fmt.Sprintf("mutation %d of %s (%s)", i, name, strings.Join(ops, "; ")), in) {
			allows++
		}
	}
	t.Logf("%d base inputs and %d mutations decided identically but for %d exact-money corrections, %d counts beyond 2^64 now refused, %d confirmations without a clock now expired, %d stage layer lists now shown and %d ill-typed stage fields now refused (%d mutations allowed)",
		len(bases), n, corrected, hugeCounts, clockless, stageLists, stageFields, allows)
}

// compareDecisions fails the test when the two engines disagree on in; it
// reports whether the decision was an allow.
func compareDecisions(t *testing.T, current, baseline *policy.Engine, name string, in map[string]any) bool {
	t.Helper()
	ctx := context.Background()
	// each engine decides with the training facts of its own bundle (none
	// for a baseline older than the facts model)
	got, gotErr := current.Decide(ctx, admission.WithFactsCopy(in, current.Facts()))
	want, wantErr := baseline.Decide(ctx, admission.WithFactsCopy(in, baseline.Facts()))
	if wantErr != nil && gotErr == nil && strings.Contains(wantErr.Error(), "modulo on floating-point number") && exactTotal(got) {
		corrected++ // the baseline failed on inexact money (issue 15 item 7)
		return got.Allow
	}
	if code(gotErr) != code(wantErr) {
		t.Fatalf("%s: error %v, baseline %v", name, gotErr, wantErr)
	}
	if gotErr != nil {
		return false
	}
	g, w := comparable(t, got), comparable(t, want)
	if g != w {
		if beyondFloat(want) && exactTotal(got) {
			corrected++
			return got.Allow
		}
		if rest, ok := withoutHugeCountFindings(in, got); ok && comparable(t, rest) == w {
			hugeCounts++
			return got.Allow
		}
		if rest, ok := withoutClocklessExpiry(in, got); ok && comparable(t, rest) == w {
			clockless++
			return got.Allow
		}
		if rest, ok := withoutStageFieldFindings(got); ok && comparable(t, rest) == w {
			stageFields++
			return got.Allow
		}
		if shown, ok := withStageListsWithheld(got); ok && comparable(t, shown) == w {
			stageLists++
			return got.Allow
		}
		t.Fatalf("%s: decisions differ\n got: %s\nwant: %s", name, g, w)
	}
	return got.Allow
}

// hugeCounts counts decisions that differ only by MANIFEST_FIELD_INVALID
// findings on count fields holding an integer of 2^64 or more (those 64 bits
// of mantissa do not hold: 2^64 + 1, 1.2e29), beyond the manifest schema's
// maximum (1e18), so never an input the server evaluates.
// Before facts model 4 the manifest gate's fast check passed a count on its
// digits, while lib.is_count, the guard every gate computes with, refuses
// such a number (OPA's floor of it is inexact): the gates then skipped the
// rules that read it. The field check is now lib.is_count's, field by field.
var hugeCounts int

var twoTo64 = new(big.Int).Lsh(big.NewInt(1), 64)

// withoutHugeCountFindings is d without its MANIFEST_FIELD_INVALID findings
// on fields whose manifest value is an integer of 2^64 or more (allow as
// the rest gives it); ok when there was at least one. (Only such a finding
// is forgiven: one on a value 64 bits of mantissa hold still fails.)
func withoutHugeCountFindings(in map[string]any, d policy.Decision) (policy.Decision, bool) {
	return withoutFindings(d, func(v api.Finding) bool {
		var field string
		_, err := fmt.Sscanf(v.Message, "manifest field %s is", &field)
		return v.Code == "MANIFEST_FIELD_INVALID" && err == nil && hugeInteger(in, field)
	})
}

// withoutFindings is d without the violations drop selects, allow as the
// rest gives it; ok when it dropped at least one.
func withoutFindings(d policy.Decision, drop func(api.Finding) bool) (policy.Decision, bool) {
	out := d
	out.Violations = []api.Finding{}
	for _, v := range d.Violations {
		if !drop(v) {
			out.Violations = append(out.Violations, v)
		}
	}
	out.Allow = len(out.Violations) == 0
	return out, len(out.Violations) < len(d.Violations)
}

// stageFields counts decisions that differ only by MANIFEST_FIELD_INVALID
// findings on objective.stage, stages or stage_settings. Before facts model
// 5 the field check did not list them: without the schema in front, a
// manifest without objective.stage or with `stages` of another type fell
// back to the default stages, and a stage's ill-typed settings were ignored
// or judged only when the run entered the stage.
var stageFields int

var stageField = regexp.MustCompile(`^manifest field /(objective/stage|stages|stage_settings(/[a-z_]+)*) is `)

// withoutStageFieldFindings is d without those findings (allow as the rest
// gives it); ok when there was at least one.
func withoutStageFieldFindings(d policy.Decision) (policy.Decision, bool) {
	return withoutFindings(d, func(v api.Finding) bool {
		return v.Code == "MANIFEST_FIELD_INVALID" && stageField.MatchString(v.Message)
	})
}

// clockless counts decisions that differ only by a CONFIRMATION_EXPIRED
// finding on an input whose now is not a number. The confirmation gate
// compared exp with now as given, and OPA orders every number above null,
// so a confirmation passed the check without a clock (the entitlement gate
// denied such an input all the same); it now needs now to be a number.
var clockless int

// withoutClocklessExpiry is d without its CONFIRMATION_EXPIRED findings
// when in.now is not a number (allow as the rest gives it); ok when there
// was one.
func withoutClocklessExpiry(in map[string]any, d policy.Decision) (policy.Decision, bool) {
	switch in["now"].(type) {
	case json.Number, int, int64, float64:
		return d, false
	}
	return withoutFindings(d, func(v api.Finding) bool { return v.Code == "CONFIRMATION_EXPIRED" })
}

// stageLists counts decisions that differ only in PP_LAYERS_INDIVISIBLE's
// message on a pipeline_split.stage_layers list of counts: the message
// withheld every list (lib.show shows scalars only) and now shows one that
// holds only counts.
var stageLists int

var shownStageList = regexp.MustCompile(`^pipeline_split\.stage_layers \[[0-9.e+,-]*\] does not place `)

// withStageListsWithheld is d with a shown list of counts in that message
// written back as "(withheld)"; ok when there was one.
func withStageListsWithheld(d policy.Decision) (policy.Decision, bool) {
	out := d
	out.Violations = slices.Clone(d.Violations)
	changed := false
	for i, v := range out.Violations {
		if v.Code == "PP_LAYERS_INDIVISIBLE" && shownStageList.MatchString(v.Message) {
			out.Violations[i].Message = shownStageList.ReplaceAllString(v.Message, "pipeline_split.stage_layers (withheld) does not place ")
			changed = true
		}
	}
	return out, changed
}

func hugeInteger(in map[string]any, pointer string) bool {
	var x any = in["manifest"]
	for _, step := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		o, ok := x.(map[string]any)
		if !ok {
			return false
		}
		x = o[step]
	}
	n, ok := x.(json.Number)
	if !ok {
		return false
	}
	i, ok := new(big.Int).SetString(n.String(), 10)
	return ok && i.Cmp(twoTo64) >= 0
}

// corrected counts decisions that differ only because the baseline's money
// was inexact: before lib.div_floor, amounts of 2^63 micro-USD and more went
// through a 64-bit float (issue 15 item 7), giving wrong cents or failing
// with "rem: modulo on floating-point number". Such a difference is accepted
// when the baseline had an amount that large (or that error) and the
// current total is the exact sum of its parts.
var corrected int

var twoTo63 = new(big.Int).Lsh(big.NewInt(1), 63)

func microUSD(d policy.Decision, key string) (*big.Int, bool) {
	n, ok := new(big.Int).SetString(fmt.Sprint(d.Estimates[key]), 10)
	return n, ok
}

func beyondFloat(d policy.Decision) bool {
	for k := range d.Estimates {
		if n, ok := microUSD(d, k); ok && strings.HasSuffix(k, "_micro_usd") && n.Cmp(twoTo63) >= 0 {
			return true
		}
	}
	return false
}

func exactTotal(d policy.Decision) bool {
	sum := new(big.Int)
	for _, k := range []string{"compute_cost_micro_usd", "storage_cost_micro_usd", "egress_cost_micro_usd"} {
		n, ok := microUSD(d, k)
		if !ok {
			return false
		}
		sum.Add(sum, n)
	}
	total, ok := microUSD(d, "total_cost_micro_usd")
	return ok && total.Cmp(sum) == 0
}

func code(err error) string {
	var pe *policy.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &pe):
		return string(pe.Code)
	}
	return err.Error()
}

func comparable(t *testing.T, d policy.Decision) string {
	t.Helper()
	b, err := json.Marshal(struct {
		D    policy.Decision
		Mask []string
		Err  string
	}{d, d.LogMask, fmt.Sprint(d.LogMaskErr)})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func baseInputs(t *testing.T) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	paths, err := filepath.Glob(filepath.Join("..", "..", "fixtures", "manifests", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("fixtures: %v", err)
	}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := manifest.Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out[filepath.Base(p)] = roundTripInput(t, scenario.OfflineInput(raw, doc, nil, nil, time.Unix(1764403200, 0), nil))
	}
	for _, kind := range limitsKinds {
		out[kind] = roundTripInput(t, limitsInput(t, kind))
	}
	return out
}

// roundTripInput turns an input into plain JSON values (numbers json.Number)
// that mutate can edit in place.
func roundTripInput(t *testing.T, in map[string]any) map[string]any {
	t.Helper()
	return deepCopy(t, in)
}

func deepCopy(t *testing.T, in map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var out map[string]any
	if err := dec.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Values a mutation writes: boundary numbers, malformed and extreme money,
// credential-shaped and secret-named strings, wrong types.
var mutationValues = []any{
	json.Number("0"), json.Number("1"), json.Number("-1"), json.Number("2"), json.Number("3"), json.Number("4"),
	json.Number("7"), json.Number("8"), json.Number("16"), json.Number("64"), json.Number("128"), json.Number("1000"),
	json.Number("2.5"), json.Number("6.125"), json.Number("0.5"), json.Number("8760"), json.Number("100000"),
	json.Number("1e3"), json.Number("1000000000000000000"), json.Number("123456789012345678901234567890"),
	"", "x", "2.49", "0.000001", "999999999999.999999", "1e3", "2,000.00", "-5", "00.10",
	"us-east-1", "eu-west-1", "mit", "proprietary", "ito-evals", "2026.10", "2025.01",
	"bf16", "fp16", "fp8", "fp32", "full", "selective", "none", "pretrain", "sft",
	"A100-80GB", "H100-80GB", "V100-32GB", "A10-24GB", "infiniband-hdr-200g",
	"AKIAIOSFODNN7EXAMPLE", "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
	"https://user:pass@example.com/x", "https://b.example/x?sig=abc&se=2026", "Bearer abcdefghijklmnopqrstuvwxyz",
	"sha256:" + strings.Repeat("ab", 32), "train.create", "train.cancel",
	true, false, nil, map[string]any{}, []any{},
}

var mutationKeys = []string{"api_key", "password", "token", "client_secret", "AKIAIOSFODNN7EXAMPLE", "note", "region"}

// mutate applies one random change to in and describes it.
func mutate(rng *rand.Rand, in map[string]any) string { return mutateWith(rng, in, mutationValues) }

// mutateWith is mutate writing values.
func mutateWith(rng *rand.Rand, in map[string]any, mutationValues []any) string {
	var leaves []leaf
	collect(in, "", &leaves)
	if len(leaves) == 0 {
		return "none"
	}
	l := leaves[rng.IntN(len(leaves))]
	switch op := rng.IntN(10); {
	case op < 6: // replace a value
		v := mutationValues[rng.IntN(len(mutationValues))]
		l.set(v)
		return fmt.Sprintf("%s = %v", l.path, v)
	case op < 7: // remove a field
		if l.remove != nil {
			l.remove()
			return "remove " + l.path
		}
		return "none"
	case op < 8: // scale a number (0 stays 0: "00" is no JSON number)
		if n, ok := l.value.(json.Number); ok && n.String() != "0" {
			f := []string{"2", "10", "1000"}[rng.IntN(3)]
			l.set(json.Number(n.String() + strings.Repeat("0", len(f)-1)))
			return fmt.Sprintf("%s × %s", l.path, f)
		}
		return "none"
	case op < 9: // add a field next to the value
		if l.parent != nil {
			k := mutationKeys[rng.IntN(len(mutationKeys))]
			v := mutationValues[rng.IntN(len(mutationValues))]
			l.parent[k] = v
			return fmt.Sprintf("add %s/%s = %v", l.dir, k, v)
		}
		return "none"
	default: // duplicate a dataset
		m, _ := in["manifest"].(map[string]any)
		if d, ok := m["data"].([]any); ok && len(d) > 0 {
			m["data"] = append(d, d[rng.IntN(len(d))])
			return "duplicate a dataset"
		}
		return "none"
	}
}

type leaf struct {
	path, dir string
	value     any
	parent    map[string]any
	set       func(any)
	remove    func()
}

func collect(v any, path string, out *[]leaf) {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(x) {
			p := path + "/" + k
			switch x[k].(type) {
			case map[string]any, []any:
				collect(x[k], p, out)
			}
			k := k
			*out = append(*out, leaf{path: p, dir: path, value: x[k], parent: x,
				set: func(nv any) { x[k] = nv }, remove: func() { delete(x, k) }})
		}
	case []any:
		for i := range x {
			p := fmt.Sprintf("%s/%d", path, i)
			switch x[i].(type) {
			case map[string]any, []any:
				collect(x[i], p, out)
			}
			i := i
			*out = append(*out, leaf{path: p, dir: path, value: x[i], set: func(nv any) { x[i] = nv }})
		}
	}
}
