package codes

import (
	"bytes"
	"flag"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/policies"
)

var update = flag.Bool("update", false, "rewrite docs/codes.md")

// TestCodesDocIsCurrent fails when docs/codes.md differs from what the policy
// METADATA and the Go code list generate (`make codes`, or go test -update).
func TestCodesDocIsCurrent(t *testing.T) {
	pc, err := FromPolicy(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	want := Markdown(pc, api.Registry())
	path := filepath.Join("..", "..", "docs", "codes.md")
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("docs/codes.md is stale: run `make codes` (or go test ./gatekeeper/codes -update)")
	}
}

// TestEveryPolicyCodeIsWellFormed: UPPER_SNAKE, a gate, a meaning, and no
// code claimed by both the policy and Go with different meanings.
func TestEveryPolicyCodeIsWellFormed(t *testing.T) {
	pc, err := FromPolicy(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	if len(pc) < 30 {
		t.Fatalf("only %d policy codes found; METADATA not read?", len(pc))
	}
	upper := regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$`)
	gates := map[string]bool{"entitlement": true, "confirmation": true, "idempotency": true, "budget": true,
		"data": true, "parallelism": true, "manifest": true, "admission": true, "caller": true, "booking": true, "workload": true,
		"lifecycle": true, "checkpoint": true, "datachecks": true, "rlvr": true}
	for _, e := range pc {
		levelOK := e.Level == "deny" || e.Level == "warn" || e.Level == "deny, warn"
		if !upper.MatchString(string(e.Code)) || !gates[e.Gate] || e.Meaning == "" || !levelOK {
			t.Errorf("policy code %+v", e)
		}
	}
	for _, e := range api.Registry() {
		if !upper.MatchString(string(e.Code)) {
			t.Errorf("go code %q malformed", e.Code)
		}
	}
}

// TestGoCodesAreRegistered holds the Go codes to the same two-way standard
// as the policy's: every UPPER_SNAKE string literal in non-test Go that
// reads as a code is a registry code or a policy code, every registry entry
// is produced (its constant is used) outside gatekeeper/api, and every code
// constant of gatekeeper/api is in the registry.
func TestGoCodesAreRegistered(t *testing.T) {
	pc, err := FromPolicy(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, e := range pc {
		known[string(e.Code)] = true
	}
	registered := map[string]bool{}
	for _, e := range api.Registry() {
		registered[string(e.Code)] = true
		known[string(e.Code)] = true
	}
	root := filepath.Join("..", "..")
	code := regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$`)
	// Literals shaped like codes that are not codes: environment variable
	// names the CLI and tests read.
	notCodes := regexp.MustCompile(`^(ITOGATE|KUBEBUILDER|XDG|GO[A-Z]*)_`)
	constOf := map[string]string{} // constant name → code, from gatekeeper/api
	used := map[string]bool{}      // api.CodeX selectors outside gatekeeper/api
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(gotoken.NewFileSet(), p, nil, 0)
		if err != nil {
			return err
		}
		inAPI := filepath.ToSlash(filepath.Dir(p)) == filepath.ToSlash(filepath.Join(root, "gatekeeper", "api"))
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				if inAPI && len(n.Names) == 1 && len(n.Values) == 1 && strings.HasPrefix(n.Names[0].Name, "Code") {
					if lit, ok := n.Values[0].(*ast.BasicLit); ok {
						constOf[n.Names[0].Name], _ = strconv.Unquote(lit.Value)
					}
				}
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == "api" && strings.HasPrefix(n.Sel.Name, "Code") {
					used[n.Sel.Name] = true
				}
			case *ast.BasicLit:
				s, err := strconv.Unquote(n.Value)
				if n.Kind == gotoken.STRING && err == nil && code.MatchString(s) && !notCodes.MatchString(s) && !known[s] && !inAPI {
					t.Errorf("%s: %q reads as a code but is neither in the api registry nor a policy code", p, s)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(constOf) < 50 {
		t.Fatalf("read %d code constants from gatekeeper/api; parsing broken?", len(constOf))
	}
	for name, c := range constOf {
		if !registered[c] {
			t.Errorf("api.%s (%s) is not in the registry", name, c)
		}
		if !used[name] {
			t.Errorf("api.%s (%s) is produced nowhere outside gatekeeper/api", name, c)
		}
	}
	for c := range registered {
		found := false
		for _, v := range constOf {
			found = found || v == c
		}
		if !found {
			t.Errorf("registry code %s has no constant", c)
		}
	}
}
