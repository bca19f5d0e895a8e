package policies

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

var update = flag.Bool("update", false, "rewrite the generated Rego test data under ito/testdata from fixtures/")

const (
	manifestsDir = "../fixtures/manifests"
	casesFile    = "../fixtures/cases/policy-cases.json"
	baseCase     = "llama3-8b.json" // the example every Rego test starts from
	baseData     = "ito/testdata/base/data.json"
	fixturesData = "ito/testdata/fixtures/data.json"
)

// TestRego runs every Rego test (opa test) in-process, so `go test ./policies/`
// covers the policies too.
func TestRego(t *testing.T) {
	ignoreSchemas := func(_ string, info fs.FileInfo, _ int) bool {
		return info.IsDir() && info.Name() == "schemas"
	}
	modules, store, err := tester.Load([]string{"."}, ignoreSchemas)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := tester.NewRunner().
		SetStore(store).
		CapturePrintOutput(true).
		RaiseBuiltinErrors(true). // the server evaluates with rego.StrictBuiltinErrors
		SetTimeout(time.Minute).
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
	mustUnmarshal(t, ManifestSchema(), &manifest)
	mustUnmarshal(t, InputSchema(), &input)
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
	manifestSchema := compileSchema(t, ManifestSchema(), "https://itogate.dev/schemas/manifest.v1.json")
	inputSchema := compileSchema(t, InputSchema(), "https://itogate.dev/schemas/input.json")
	query := prepare(t)

	var base any
	for i := range doc.Cases {
		c := &doc.Cases[i]
		raw := mustReadFile(t, filepath.Join(manifestsDir, c.Manifest))
		if err := manifestSchema.Validate(decode(t, raw)); err != nil {
			t.Errorf("%s: not a valid manifest: %v", c.Manifest, err)
		}
		input := buildInput(t, doc.Facts, raw, fabrics)
		if err := inputSchema.Validate(roundTrip(t, input)); err != nil {
			t.Errorf("%s: input not valid against schemas/input.json: %v", c.Manifest, err)
		}
		c.Input = input
		if c.Manifest == baseCase {
			base = input
		}

		got := evaluate(t, query, input)
		want := decisionSummary{Allow: c.Allow, Codes: nonNil(c.Codes), Warnings: nonNil(c.Warnings)}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decision %+v, want %+v", c.Manifest, got, want)
		}
	}
	if base == nil {
		t.Fatalf("no case for %s", baseCase)
	}
	checkGenerated(t, baseData, map[string]any{"input": base})
	checkGenerated(t, fixturesData, map[string]any{"cases": doc.Cases})
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
	loader, err := bundle.NewFSLoader(Bundle())
	if err != nil {
		t.Fatal(err)
	}
	b, err := bundle.NewCustomReader(loader).WithRegoVersion(ast.RegoV1).WithProcessAnnotations(true).Read()
	if err != nil {
		t.Fatal(err)
	}
	q, err := rego.New(
		rego.Query(EntrypointQuery),
		rego.ParsedBundle("itogate", &b),
		rego.StrictBuiltinErrors(true), // as the server evaluates
	).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func evaluate(t *testing.T, q rego.PreparedEvalQuery, input any) decisionSummary {
	t.Helper()
	rs, err := q.Eval(context.Background(), rego.EvalInput(input))
	if err != nil {
		t.Fatalf("evaluate: %v", err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		t.Fatalf("decision undefined: %v", rs)
	}
	var d struct {
		Allow      bool `json:"allow"`
		Violations []struct {
			Code string `json:"code"`
		} `json:"violations"`
		Warnings []struct {
			Code string `json:"code"`
		} `json:"warnings"`
	}
	mustUnmarshal(t, mustMarshal(t, rs[0].Expressions[0].Value), &d)
	s := decisionSummary{Allow: d.Allow, Codes: []string{}, Warnings: []string{}}
	for _, v := range d.Violations {
		s.Codes = append(s.Codes, v.Code)
	}
	for _, w := range d.Warnings {
		s.Warnings = append(s.Warnings, w.Code)
	}
	return s
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
		t.Error("schemas are reachable through Bundle()")
	}
	if _, err := fs.ReadFile(Schemas(), "input.json"); err != nil {
		t.Error(err)
	}
}

var codePattern = regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$`)

// TestRuleMetadata: every deny and warn rule documents its code, and every code
// is asserted by some test or fixture case.
func TestRuleMetadata(t *testing.T) {
	var tests bytes.Buffer
	tests.Write(mustReadFile(t, casesFile))
	gates := map[string]string{}
	err := fs.WalkDir(os.DirFS("ito"), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".rego" {
			return err
		}
		src := mustReadFile(t, filepath.Join("ito", p))
		if strings.HasSuffix(p, "_test.rego") {
			tests.Write(src)
			return nil
		}
		mod, err := ast.ParseModuleWithOpts(p, string(src), ast.ParserOptions{ProcessAnnotation: true, RegoVersion: ast.RegoV1})
		if err != nil {
			return err
		}
		pkgGate := strings.TrimPrefix(mod.Package.Path.String(), "data.ito.")
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
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(gates) == 0 {
		t.Fatal("no codes found")
	}
	for code := range gates {
		if !bytes.Contains(tests.Bytes(), []byte(`"`+code+`"`)) {
			t.Errorf("%s is not asserted by any Rego test or fixture case", code)
		}
	}
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
func decode(t *testing.T, raw []byte) any {
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

func mustReadFile(t *testing.T, name string) []byte {
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

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}
