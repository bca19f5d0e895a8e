package policies

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/schemas"
)

var update = flag.Bool("update", false, "rewrite the generated Rego test data under ito/testdata from fixtures/")

const (
	manifestsDir = "../fixtures/manifests"
	casesFile    = "../fixtures/cases/policy-cases.json"
	baseCase     = "llama3-8b.json" // the example every Rego test starts from
	baseData     = "ito/testdata/base/data.json"
	fixturesData = "ito/testdata/fixtures/data.json"
	codeCases    = "../fixtures/cases/code-cases.json"
	codesData    = "ito/testdata/codes/data.json"
	workloadData = "ito/testdata/workload/data.json"         // base review and cases of the workload gate
	estimates    = "../fixtures/cases/policy-estimates.json" // golden: every fixture's full decision
)

// TestRego runs every Rego test (opa test) in-process, so `go test ./policies/`
// covers the policies too.
func TestRego(t *testing.T) {
	modules, store, err := tester.Load([]string{"."}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := tester.NewRunner().
		SetStore(store).
		CapturePrintOutput(true).
		RaiseBuiltinErrors(true).      // the server evaluates with rego.StrictBuiltinErrors
		SetTimeout(patience.Deadline). // per Rego test; -race on a loaded machine is slow
		Run(context.Background(), modules)
	if err != nil {
		t.Fatal(err)
	}
	var tests, cases int
	for r := range ch {
		tests++
		name := r.Package + "." + r.Name
		for sub, sr := range r.SubResults.Iter {
			cases++
			if sr.Fail {
				t.Errorf("%s[%s]: FAIL", name, strings.Join(sub, "/"))
			}
		}
		if !r.Pass() {
			t.Errorf("%s: FAIL (%v)\n%s", name, r.Error, r.Output)
		}
	}
	if tests == 0 {
		t.Fatal("no Rego tests ran")
	}
	t.Logf("%d Rego tests, %d parameterized cases", tests, cases)
}

// TestInputSchemaInlinesManifestSchema: input.json describes input.manifest with
// an exact copy of manifest.v1.json, so `opa check --schema` sees the real fields.
func TestInputSchemaInlinesManifestSchema(t *testing.T) {
	var manifest, input map[string]any
	mustUnmarshal(t, schemas.Manifest(), &manifest)
	mustUnmarshal(t, schemas.Input(), &input)
	defs, _ := input["$defs"].(map[string]any)
	if !reflect.DeepEqual(defs["manifest"], manifest) {
		t.Fatal("schemas/input.json $defs.manifest differs from schemas/manifest.v1.json: copy the manifest schema into it verbatim")
	}
}

// fixtureCase is one entry of fixtures/cases/policy-cases.json, and, with its
// input, of the generated ito/testdata/fixtures/data.json.
type fixtureCase struct {
	Manifest string   `json:"manifest"`
	Allow    bool     `json:"allow"`
	Codes    []string `json:"codes"`
	Warnings []string `json:"warnings"`
	Input    any      `json:"input,omitempty"`
}

// TestFixtureCases builds the input of every fixture case (see the cases file's
// description), validates it against the schemas, evaluates the decision
// through Bundle() the way the server does, and checks the generated copies
// the Rego tests read.
func TestFixtureCases(t *testing.T) {
	var doc struct {
		Facts map[string]any `json:"facts"`
		Cases []fixtureCase  `json:"cases"`
	}
	mustUnmarshal(t, mustReadFile(t, casesFile), &doc)

	entries, err := os.ReadDir(manifestsDir)
	if err != nil {
		t.Fatal(err)
	}
	var fixtures, listed []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			fixtures = append(fixtures, e.Name())
		}
	}
	for _, c := range doc.Cases {
		listed = append(listed, c.Manifest)
	}
	sort.Strings(listed)
	if !slices.Equal(fixtures, listed) {
		t.Fatalf("fixtures/manifests has %v but %s lists %v: every fixture needs exactly one case", fixtures, casesFile, listed)
	}

	fabrics := bundleData(t, "ito/tables/fabrics/data.json")
	manifestSchema := compileSchema(t, schemas.Manifest(), "https://itogate.dev/schemas/manifest.v1.json")
	inputSchema := compileSchema(t, schemas.Input(), "https://itogate.dev/schemas/input.json")
	query := prepare(t)

	var base any
	var golden []goldenCase
	for i := range doc.Cases {
		c := &doc.Cases[i]
		raw := mustReadFile(t, filepath.Join(manifestsDir, c.Manifest))
		if err := manifestSchema.Validate(decode(t, raw)); err != nil {
			t.Errorf("%s: not a valid manifest: %v", c.Manifest, err)
		}
		input := buildInput(t, doc.Facts, raw, fabrics)
		if c.Manifest == baseCase {
			base = roundTrip(t, input) // without facts: the Rego tests patch it
		}
		withFacts(t, input)
		if err := inputSchema.Validate(roundTrip(t, input)); err != nil {
			t.Errorf("%s: input not valid against schemas/input.json: %v", c.Manifest, err)
		}
		c.Input = input

		d := decideBothWays(t, query, input)
		got := d.summary()
		want := decisionSummary{Allow: c.Allow, Codes: nonNil(c.Codes), Warnings: nonNil(c.Warnings)}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decision %+v, want %+v", c.Manifest, got, want)
		}
		if !c.Allow {
			for _, v := range d.Violations {
				if v.Gate == "parallelism" && v.Fix == "" {
					t.Errorf("%s: parallelism deny %s without a fix", c.Manifest, v.Code)
				}
			}
			if d.hasGate("parallelism") && d.Estimates["fix_layout"] == nil {
				t.Errorf("%s: parallelism deny without estimates.fix_layout", c.Manifest)
			}
		}
		if c.Allow && d.Estimates["fix_layout"] != nil {
			t.Errorf("%s: an allow carries a fix_layout (the search must not run on allows)", c.Manifest)
		}
		golden = append(golden, goldenCase{Manifest: c.Manifest, Decision: d})
	}
	if base == nil {
		t.Fatalf("no case for %s", baseCase)
	}
	checkGenerated(t, baseData, map[string]any{"input": base})
	checkGenerated(t, fixturesData, map[string]any{"cases": doc.Cases})
	checkGenerated(t, estimates, map[string]any{
		"description": "Generated by go test ./policies -update: the full decision (violations with their fixes, " +
			"warnings, estimates) of every fixture in fixtures/manifests, evaluated as policy-cases.json describes. " +
			"A change to any fixture's outcome, fix or estimate fails the test until this file is regenerated, " +
			"so the change shows in review.",
		"fixtures": golden,
	})
}

type goldenCase struct {
	Manifest string   `json:"manifest"`
	Decision decision `json:"decision"`
}

// buildInput is the rule the cases file describes: facts + the manifest, its
// digest, and a booking and confirmation that match it.
func buildInput(t *testing.T, facts map[string]any, raw []byte, fabrics map[string]any) map[string]any {
	t.Helper()
	input := roundTrip(t, facts).(map[string]any)
	manifest := decode(t, raw).(map[string]any)
	sum := sha256.Sum256(raw)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	hw := manifest["hardware"].(map[string]any)
	budget := manifest["budget"].(map[string]any)

	input["manifest"] = manifest
	input["manifest_digest"] = digest
	ent := input["entitlement"].(map[string]any)
	ent["gpu"] = map[string]any{"type": hw["gpu_type"], "nodes": hw["nodes"], "gpus_per_node": hw["gpus_per_node"]}
	ent["region"] = hw["region"]
	fabric := ent["fabric"].(map[string]any)
	fabric["type"] = hw["fabric"]
	if row, ok := fabrics[hw["fabric"].(string)].(map[string]any); ok {
		gbytes, err := row["gbytes_per_s_per_gpu"].(json.Number).Float64()
		if err != nil {
			t.Fatal(err)
		}
		fabric["gbps_per_gpu"] = json.Number(fmt.Sprint(gbytes * 8))
	}
	conf := input["confirmation"].(map[string]any)
	conf["manifest_digest"] = digest
	conf["cost_usd"] = budget["ceiling_usd"]
	return input
}

type decisionSummary struct {
	Allow    bool
	Codes    []string
	Warnings []string
}

func prepare(t *testing.T) rego.PreparedEvalQuery {
	t.Helper()
	return prepareQuery(t, EntrypointQuery)
}

// prepareQuery prepares query against Bundle(), as the server does.
func prepareQuery(t *testing.T, query string) rego.PreparedEvalQuery {
	t.Helper()
	loader, err := bundle.NewFSLoader(Bundle())
	if err != nil {
		t.Fatal(err)
	}
	b, err := bundle.NewCustomReader(loader).WithRegoVersion(ast.RegoV1).WithProcessAnnotations(true).Read()
	if err != nil {
		t.Fatal(err)
	}
	q, err := rego.New(
		rego.Query(query),
		rego.ParsedBundle("itogate", &b),
		rego.StrictBuiltinErrors(true), // as the server evaluates
	).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// decision is data.ito.admission.decision as Go reads it.
type decision struct {
	Allow      bool           `json:"allow"`
	Violations []finding      `json:"violations"`
	Warnings   []finding      `json:"warnings"`
	Estimates  map[string]any `json:"estimates"`
}

type finding struct {
	Code    string `json:"code"`
	Gate    string `json:"gate"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

func (d decision) summary() decisionSummary {
	s := decisionSummary{Allow: d.Allow, Codes: []string{}, Warnings: []string{}}
	for _, v := range d.Violations {
		s.Codes = append(s.Codes, v.Code)
	}
	for _, w := range d.Warnings {
		s.Warnings = append(s.Warnings, w.Code)
	}
	return s
}

func (d decision) hasGate(gate string) bool {
	for _, v := range d.Violations {
		if v.Gate == gate {
			return true
		}
	}
	return false
}

func decide(t *testing.T, q rego.PreparedEvalQuery, input any) decision {
	t.Helper()
	rs, err := q.Eval(context.Background(), rego.EvalInput(input))
	if err != nil {
		t.Fatalf("evaluate: %v", err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		t.Fatalf("decision undefined: %v", rs)
	}
	var d decision
	dec := json.NewDecoder(bytes.NewReader(mustMarshal(t, rs[0].Expressions[0].Value)))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

// factsModel is the training-facts model over Bundle()'s data, as the
// server builds input.facts with it: the engine's, whose parallelism facts
// carry the layout search's fix on a parallelism deny.
var factsModel = sync.OnceValues(func() (*trainfacts.Model, error) {
	e, err := policy.New(context.Background(), policy.Options{Bundle: Bundle()})
	if err != nil {
		return nil, err
	}
	return e.Facts(), nil
})

// withFacts sets input.facts as the server does (admission.WithFacts).
func withFacts(t *testing.T, input any) {
	t.Helper()
	m, err := factsModel()
	if err != nil {
		t.Fatal(err)
	}
	in := input.(map[string]any)
	facts, err := m.Compute(in)
	if err != nil {
		t.Fatalf("training facts: %v", err)
	}
	in["facts"] = roundTrip(t, facts)
}

// decideBothWays evaluates input as the server does, with Go's training
// facts (input.facts; computed here when the input has none), and again
// without them, when the gates read the bundle's Rego reference: the two
// decisions must be identical, findings, fixes and estimates included.
func decideBothWays(t *testing.T, q rego.PreparedEvalQuery, input any) decision {
	t.Helper()
	in := roundTrip(t, input).(map[string]any)
	if _, ok := in["facts"]; !ok {
		withFacts(t, in)
	}
	d := decide(t, q, in)
	delete(in, "facts")
	ref := decide(t, q, in)
	// the layout search's fix is Go's alone (no Rego reference): its text
	// and estimates.fix_layout are left out of the comparison
	if got, want := string(mustMarshal(t, withoutFix(d))), string(mustMarshal(t, withoutFix(ref))); got != want {
		t.Fatalf("the decision with Go's facts differs from the Rego reference's:\n facts: %s\n   ref: %s", got, want)
	}
	return d
}

// withoutFix is d without the layout search's part: estimates.fix_layout
// and, in the parallelism gate's findings, the fix text before its hint.
func withoutFix(d decision) decision {
	out := d
	out.Estimates = maps.Clone(d.Estimates)
	delete(out.Estimates, "fix_layout")
	strip := func(fs []finding) []finding {
		out := slices.Clone(fs)
		for i := range out {
			if j := strings.Index(out[i].Fix, ". Or: "); j >= 0 && out[i].Gate == "parallelism" {
				out[i].Fix = out[i].Fix[j:]
			}
		}
		return out
	}
	out.Violations, out.Warnings = strip(d.Violations), strip(d.Warnings)
	return out
}

// checkGenerated compares (or with -update writes) a generated test data file.
func checkGenerated(t *testing.T, name string, doc any) {
	t.Helper()
	want := append(mustMarshalIndent(t, doc), '\n')
	if *update {
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(name)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s is stale (generated from fixtures/): run go test ./policies -update", name)
	}
}

// TestBundle: Bundle() is exactly the production bundle.
func TestBundle(t *testing.T) {
	var files []string
	err := fs.WalkDir(Bundle(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ito/admission/admission.rego", "ito/config/data.json",
		"ito/tables/gpus/data.json", "ito/tables/fabrics/data.json",
	} {
		if !slices.Contains(files, want) {
			t.Errorf("bundle lacks %s", want)
		}
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.rego") || strings.Contains(f, "testdata/") || !strings.HasPrefix(f, "ito/") {
			t.Errorf("bundle holds %s", f)
		}
	}
	if _, err := fs.ReadFile(Bundle(), "ito/admission/admission_test.rego"); err == nil {
		t.Error("a test module can be opened through Bundle()")
	}
	if _, err := fs.Stat(Bundle(), "schemas/input.json"); err == nil {
		t.Error("a schemas/ directory is reachable through Bundle()")
	}
}

// packageGates names the gate of a package whose name is not its gate's:
// the data gate lives in ito.datasets, because a package named data would
// shadow the root data document wherever it is imported.
var packageGates = map[string]string{"datasets": "data"}

var codePattern = regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$`)

// TestRuleMetadata: every deny and warn rule documents its code (TestEveryCodeIsProduced
// checks that each is produced).
func TestRuleMetadata(t *testing.T) {
	if len(policyCodes(t)) == 0 {
		t.Fatal("no codes found")
	}
}

// policyCodes reads the METADATA of every deny and warn rule, checks it, and
// returns each code with its levels ("deny", "warn").
func policyCodes(t *testing.T) map[string]map[string]bool {
	t.Helper()
	gates := map[string]string{}
	levels := map[string]map[string]bool{}
	err := fs.WalkDir(os.DirFS("ito"), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".rego" || strings.HasSuffix(p, "_test.rego") {
			return err
		}
		src := mustReadFile(t, filepath.Join("ito", p))
		mod, err := ast.ParseModuleWithOpts(p, string(src), ast.ParserOptions{ProcessAnnotation: true, RegoVersion: ast.RegoV1})
		if err != nil {
			return err
		}
		pkgGate := strings.TrimPrefix(mod.Package.Path.String(), "data.ito.")
		if g, ok := packageGates[pkgGate]; ok {
			pkgGate = g
		}
		for _, rule := range mod.Rules {
			head := rule.Head.Name.String()
			if head == "" {
				head = rule.Head.Ref().String()
			}
			if head != "deny" && head != "warn" {
				continue
			}
			where := fmt.Sprintf("%s:%d", p, rule.Location.Row)
			var a *ast.Annotations
			for _, ann := range rule.Annotations {
				if ann.Scope == "rule" {
					a = ann
				}
			}
			if a == nil {
				t.Errorf("%s: %s rule without METADATA", where, head)
				continue
			}
			code, _ := a.Custom["code"].(string)
			gate, _ := a.Custom["gate"].(string)
			switch {
			case a.Title == "" || a.Description == "":
				t.Errorf("%s: METADATA needs title and description", where)
			case !codePattern.MatchString(code):
				t.Errorf("%s: custom.code %q is not UPPER_SNAKE", where, code)
			case gate != pkgGate:
				t.Errorf("%s: custom.gate %q, want the package's gate %q", where, gate, pkgGate)
			case gates[code] != "" && gates[code] != gate:
				t.Errorf("%s: %s is also a code of gate %s", where, code, gates[code])
			}
			if level, _ := a.Custom["level"].(string); (head == "warn") != (level == "warn") {
				t.Errorf("%s: a %s rule needs custom.level %q", where, head, map[bool]string{true: "warn", false: "(none)"}[head == "warn"])
			}
			gates[code] = gate
			if levels[code] == nil {
				levels[code] = map[string]bool{}
			}
			levels[code][head] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return levels
}

// codeCase is one entry of fixtures/cases/code-cases.json: the base input
// (the llama3-8b fixture) changed by a JSON patch, with the exact codes.
type codeCase struct {
	Name     string    `json:"name"`
	Patch    []patchOp `json:"patch"`
	Codes    []string  `json:"codes"`
	Warnings []string  `json:"warnings"`
}

// TestEveryCodeIsProduced evaluates every fixture case and every code case
// through Bundle(), checks each code case's exact outcome, and fails when a
// code (at a level) in the policy METADATA is produced by no case, or a case
// produces a code (at a level) the METADATA does not document.
func TestEveryCodeIsProduced(t *testing.T) {
	documented := policyCodes(t)
	query := prepare(t)
	produced := map[string]map[string][]string{} // code -> level -> case names
	record := func(name string, d decision) {
		for level, fs := range map[string][]finding{"deny": d.Violations, "warn": d.Warnings} {
			for _, f := range fs {
				if produced[f.Code] == nil {
					produced[f.Code] = map[string][]string{}
				}
				produced[f.Code][level] = append(produced[f.Code][level], name)
			}
		}
	}

	var fixtures struct {
		Cases []fixtureCase `json:"cases"`
	}
	mustUnmarshal(t, mustReadFile(t, fixturesData), &fixtures)
	for _, c := range fixtures.Cases {
		record("fixture "+c.Manifest, decide(t, query, roundTrip(t, c.Input)))
	}

	var base struct {
		Input any `json:"input"`
	}
	mustUnmarshal(t, mustReadFile(t, baseData), &base)
	var doc struct {
		Cases []codeCase `json:"cases"`
	}
	mustUnmarshal(t, mustReadFile(t, codeCases), &doc)
	names := map[string]bool{}
	for _, c := range doc.Cases {
		if names[c.Name] {
			t.Errorf("%s: two code cases with this name", c.Name)
		}
		names[c.Name] = true
		input, err := applyPatch(roundTrip(t, base.Input), c.Patch)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		d := decideBothWays(t, query, input)
		want := decisionSummary{Allow: len(c.Codes) == 0, Codes: nonNil(c.Codes), Warnings: nonNil(c.Warnings)}
		if got := d.summary(); !reflect.DeepEqual(got, want) {
			t.Errorf("code case %q: decision %+v, want %+v", c.Name, got, want)
		}
		record("code case "+c.Name, d)
	}
	checkGenerated(t, codesData, map[string]any{"cases": doc.Cases})

	// The workload gate (data.ito.workload.decision, the Kubernetes
	// webhook): its cases, shared with workload_test.rego.
	var wl struct {
		Input any        `json:"input"`
		Cases []codeCase `json:"cases"`
	}
	mustUnmarshal(t, mustReadFile(t, workloadData), &wl)
	wq := prepareQuery(t, WorkloadQuery)
	for _, c := range wl.Cases {
		input, err := applyPatch(roundTrip(t, wl.Input), c.Patch)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		withMemberNames(input)
		d := decide(t, wq, input)
		if got, want := d.summary(), (decisionSummary{Allow: len(c.Codes) == 0, Codes: nonNil(c.Codes), Warnings: []string{}}); !reflect.DeepEqual(got, want) {
			t.Errorf("workload case %q: decision %+v, want %+v", c.Name, got, want)
		}
		record("workload case "+c.Name, d)
	}

	for code, levels := range documented {
		for level := range levels {
			if len(produced[code][level]) == 0 {
				t.Errorf("%s (%s) is documented but produced by no fixture, code or workload case: add one to %s or %s",
					code, level, codeCases, workloadData)
			}
		}
	}
	for code, levels := range produced {
		for level, cases := range levels {
			if !documented[code][level] {
				t.Errorf("%s (%s) is produced by %v but no %s rule documents it", code, level, cases, level)
			}
		}
	}
}

// withMemberNames sets a workload input's review.keys as the webhook does:
// every member name of review.object at any depth.
func withMemberNames(input any) {
	review := input.(map[string]any)["review"].(map[string]any)
	keys := map[string]any{}
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				keys[k] = true
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(review["object"])
	review["keys"] = keys
}

// TestExactMoney: 16 GPUs × 3 h and 8 GPUs × 6 h at "2.49" are 119.52 USD
// exactly, where float arithmetic gives 119.52000000000001; the compute
// adds the GPU-hours expected lost to failures at the same price (Megatron:
// 0.03 GPU-hours → 0.08; Llama 2 70B: 0.02 → 0.05). The Megatron fixture's
// ceiling is its exact total (119.60 compute + 2.42 storage), so a float
// error of one micro-dollar would deny it.
func TestExactMoney(t *testing.T) {
	var golden struct {
		Fixtures []goldenCase `json:"fixtures"`
	}
	dec := json.NewDecoder(bytes.NewReader(mustReadFile(t, estimates)))
	dec.UseNumber()
	if err := dec.Decode(&golden); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"megatron-llama3-8b-h100-fp8.json": {
			"gpu_hours": "48.00", "lost_gpu_hours": "0.03", "lost_work_cost_usd": "0.08",
			"compute_cost_micro_usd": "119600000", "compute_cost_usd": "119.60",
			"storage_cost_usd": "2.42", "total_cost_micro_usd": "122020000", "total_cost_usd": "122.02",
		},
		"llama2-70b-v100-fsdp.json": {
			"gpu_hours": "48.00", "lost_gpu_hours": "0.02", "lost_work_cost_usd": "0.05",
			"compute_cost_micro_usd": "119570000", "compute_cost_usd": "119.57",
		},
	}
	seen := 0
	for _, g := range golden.Fixtures {
		w, ok := want[g.Manifest]
		if !ok {
			continue
		}
		seen++
		for k, v := range w {
			if got := fmt.Sprint(g.Decision.Estimates[k]); got != v {
				t.Errorf("%s: estimates.%s = %s, want %s", g.Manifest, k, got, v)
			}
		}
		if g.Manifest == "megatron-llama3-8b-h100-fp8.json" && !g.Decision.Allow {
			t.Errorf("%s: a ceiling equal to the exact total must be allowed: %+v", g.Manifest, g.Decision.Violations)
		}
	}
	if seen != len(want) {
		t.Fatalf("found %d of the %d money fixtures in %s", seen, len(want), estimates)
	}
}

// patchOp is one RFC 6902 operation; add, remove and replace are supported.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// applyPatch applies ops to doc (decoded JSON, modified in place) and returns the result.
func applyPatch(doc any, ops []patchOp) (any, error) {
	for _, op := range ops {
		if op.Path == "" {
			if op.Op == "remove" {
				return nil, errors.New("remove the whole document")
			}
			doc = op.Value
			continue
		}
		tokens := strings.Split(strings.TrimPrefix(op.Path, "/"), "/")
		for i, tok := range tokens {
			tokens[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		}
		parent := doc
		for _, tok := range tokens[:len(tokens)-1] {
			switch p := parent.(type) {
			case map[string]any:
				parent = p[tok]
			case []any:
				i, err := strconv.Atoi(tok)
				if err != nil || i < 0 || i >= len(p) {
					return nil, fmt.Errorf("%s: no element %q", op.Path, tok)
				}
				parent = p[i]
			default:
				return nil, fmt.Errorf("%s: %q is not in a container", op.Path, tok)
			}
		}
		last := tokens[len(tokens)-1]
		value := op.Value
		if value != nil {
			value = roundTripValue(value)
		}
		switch p := parent.(type) {
		case map[string]any:
			if _, ok := p[last]; !ok && op.Op != "add" {
				return nil, fmt.Errorf("%s: no member %q", op.Path, last)
			}
			if op.Op == "remove" {
				delete(p, last)
			} else {
				p[last] = value
			}
		case []any:
			i, err := strconv.Atoi(last)
			if err != nil || i < 0 || i >= len(p) || op.Op != "replace" {
				return nil, fmt.Errorf("%s: only replace of an existing array element is supported", op.Path)
			}
			p[i] = value
		default:
			return nil, fmt.Errorf("%s: parent is not a container", op.Path)
		}
	}
	return doc, nil
}

// roundTripValue gives a patch value the decoded shape of the document (json.Number).
func roundTripValue(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var out any
	if err := d.Decode(&out); err != nil {
		panic(err)
	}
	return out
}

func compileSchema(t *testing.T, schema []byte, url string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func bundleData(t *testing.T, name string) map[string]any {
	t.Helper()
	raw, err := fs.ReadFile(Bundle(), name)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, raw).(map[string]any)
}

// decode keeps numbers as json.Number so nothing is rounded on the way.
func decode(t testing.TB, raw []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func roundTrip(t *testing.T, v any) any { t.Helper(); return decode(t, mustMarshal(t, v)) }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func mustReadFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustMarshalIndent(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustUnmarshal(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}
