package policies

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
)

// The policy lint: what a Rego linter (Regal) would check here, as a Go
// test so that `go test ./policies/` and `make test` run it. Every Rego file
// under ito/ is parsed with OPA's parser; see lintRego for the checks.

const (
	lintMaxLine  = 120 // characters (runes) per line of a production module; a tab counts as one
	lintMaxLines = 500 // lines per production module
)

// Kinds of lint finding.
const (
	lintLineLength = "line-length" // a production line longer than lintMaxLine
	lintFileLength = "file-length" // a production module longer than lintMaxLines
	lintRuleCode   = "rule-code"   // a deny or warn rule without METADATA custom.code
	lintShadowData = "shadow-data" // a package, import, rule, argument or variable named data
	lintParse      = "parse"       // the module does not parse
)

// lintExemptions are the only findings the lint tolerates, per file and
// kind. It listed the parallelism model's files that were over the limits
// when the lint was written; with the training facts (issue 24) they were
// split and wrapped, and the list is empty. Nothing outside
// ito/parallelism/ may be exempted (TestRegoLint fails), and an exemption
// that no longer matches a finding fails too, so that the list only shrinks.
var lintExemptions = map[string][]string{}

// lintFinding is one violation, at a 1-based line of a file.
type lintFinding struct {
	File string
	Line int
	Kind string
	Msg  string
}

func (f lintFinding) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", f.File, f.Line, f.Kind, f.Msg)
}

// importAsData matches an import aliased to data, which OPA's parser rejects
// (the finding then says why, beside the parse error).
var importAsData = regexp.MustCompile(`^\s*import\s+\S+\s+as\s+data\s*(#.*)?$`)

// lintRego checks one module's source and returns its findings in line
// order. Every module (tests too) must parse and must not shadow the root
// data document: no package whose last part is data (importing it would bind
// data), no import that binds data (import data.x.data, import ... as data),
// no rule, function argument or local variable (:=, some) named data. OPA's
// compiler refuses the last three as well, and its parser an alias or an
// every variable named data, but OPA accepts an import whose last part is
// data: that case is what this check is for. A production module (test
// false) must also keep its lines within lintMaxLine and itself within
// lintMaxLines, and every rule named deny or warn needs METADATA with a
// custom.code.
func lintRego(name string, src string, test bool) (out []lintFinding) {
	defer func() { slices.SortStableFunc(out, func(a, b lintFinding) int { return a.Line - b.Line }) }()
	add := func(line int, kind, format string, args ...any) {
		out = append(out, lintFinding{File: name, Line: line, Kind: kind, Msg: fmt.Sprintf(format, args...)})
	}

	lines := strings.Split(strings.TrimSuffix(src, "\n"), "\n")
	reported := map[int]bool{}
	for i, line := range lines {
		if importAsData.MatchString(line) {
			reported[i+1] = true
			add(i+1, lintShadowData, "import aliased to data shadows the root data document")
		}
		if n := utf8.RuneCountInString(line); !test && n > lintMaxLine {
			add(i+1, lintLineLength, "line is %d characters, more than %d", n, lintMaxLine)
		}
	}
	if !test && len(lines) > lintMaxLines {
		add(lintMaxLines+1, lintFileLength, "file has %d lines, more than %d", len(lines), lintMaxLines)
	}

	mod, err := ast.ParseModuleWithOpts(name, src, ast.ParserOptions{ProcessAnnotation: true, RegoVersion: ast.RegoV1})
	if err != nil {
		var errs ast.Errors
		if !errors.As(err, &errs) {
			add(1, lintParse, "%v", err)
			return out
		}
		for _, e := range errs {
			row := 1
			if e.Location != nil {
				row = e.Location.Row
			}
			if !reported[row] {
				reported[row] = true // one finding per line
				add(row, lintParse, "%s", e.Message)
			}
		}
		return out
	}

	isData := func(t *ast.Term) bool {
		v, ok := t.Value.(ast.Var)
		return ok && v.Equal(ast.DefaultRootDocument.Value)
	}
	row := func(loc *ast.Location, def int) int {
		if loc == nil {
			return def
		}
		return loc.Row
	}

	if p := mod.Package.Path; len(p) > 1 {
		if s, ok := p[len(p)-1].Value.(ast.String); ok && s == "data" {
			add(row(mod.Package.Location, 1), lintShadowData,
				"package %s ends in data: importing it binds data and shadows the root data document",
				strings.TrimPrefix(p.String(), "data."))
		}
	}
	for _, imp := range mod.Imports {
		if ref, ok := imp.Path.Value.(ast.Ref); ok && len(ref) > 1 && imp.Name().Equal(ast.DefaultRootDocument.Value) {
			add(row(imp.Location, 1), lintShadowData,
				"import %s binds data and shadows the root data document; import its parent or give it an alias", ref)
		}
	}
	for _, r := range mod.Rules {
		head := r.Head.Ref()
		at := row(r.Location, 1)
		if len(head) > 0 && isData(head[0]) {
			add(at, lintShadowData, "a rule named data shadows the root data document")
		}
		for _, arg := range r.Head.Args {
			ast.WalkVars(arg, func(v ast.Var) bool {
				if v.Equal(ast.DefaultRootDocument.Value) {
					add(row(arg.Location, at), lintShadowData, "a function argument named data shadows the root data document")
				}
				return false
			})
		}
		if !test && len(head) > 0 {
			if name := head[0].String(); name == "deny" || name == "warn" {
				if !hasCode(r) {
					add(at, lintRuleCode, "%s rule without METADATA custom.code (a code is what callers act on)", name)
				}
			}
		}
	}
	declared := func(t *ast.Term, at int) {
		ast.WalkVars(t, func(v ast.Var) bool {
			if v.Equal(ast.DefaultRootDocument.Value) {
				add(row(t.Location, at), lintShadowData, "a variable named data shadows the root data document")
			}
			return false
		})
	}
	ast.WalkExprs(mod, func(e *ast.Expr) bool {
		at := row(e.Location, 1)
		switch t := e.Terms.(type) {
		case *ast.SomeDecl:
			for _, s := range t.Symbols {
				if call, ok := s.Value.(ast.Call); ok && len(call) > 2 {
					// some k, v in xs is internal.member_3(k, v, xs): the
					// declared variables are all operands but the last.
					for _, op := range call[1 : len(call)-1] {
						declared(op, at)
					}
				} else {
					declared(s, at)
				}
			}
		default:
			if e.IsAssignment() {
				declared(e.Operand(0), at)
			}
		}
		return false
	})
	return out
}

// hasCode reports whether a rule carries METADATA with a non-empty custom.code.
func hasCode(r *ast.Rule) bool {
	for _, a := range r.Annotations {
		if code, _ := a.Custom["code"].(string); code != "" {
			return true
		}
	}
	return false
}

// TestRegoLint lints every Rego module under ito/ and fails on each finding
// that lintExemptions does not list, and on each exemption that is not
// needed or lies outside ito/parallelism/.
func TestRegoLint(t *testing.T) {
	for file := range lintExemptions {
		if !strings.HasPrefix(file, "ito/parallelism/") {
			t.Errorf("lint exemption %s: only ito/parallelism/ files may be exempted", file)
		}
	}
	used := map[string]bool{}
	production := 0
	err := fs.WalkDir(os.DirFS("."), "ito", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".rego" {
			return err
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		test := strings.HasSuffix(p, "_test.rego")
		if !test {
			production++
		}
		for _, f := range lintRego(p, string(src), test) {
			if slices.Contains(lintExemptions[p], f.Kind) {
				used[p+" "+f.Kind] = true
				continue
			}
			f.File = "policies/" + f.File
			t.Error(f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if production < 20 {
		t.Errorf("linted %d production modules; the walk is missing files", production)
	}
	for file, kinds := range lintExemptions {
		for _, kind := range kinds {
			if !used[file+" "+kind] {
				t.Errorf("lint exemption %s %s: no such finding any more; remove the exemption", file, kind)
			}
		}
	}
}

// TestRegoLintFindings feeds the lint modules with known faults, so that it
// cannot pass by finding nothing.
func TestRegoLintFindings(t *testing.T) {
	long := "# " + strings.Repeat("x", lintMaxLine-2)
	cases := []struct {
		name string
		src  string
		test bool
		want []string // "line kind"
	}{{
		name: "clean",
		src: `package a.b

import data.a.lib

# METADATA
# title: T
# custom:
#   code: A_CODE
deny contains v if {
	some k, v in lib.xs
	every x in lib.ys {
		x > k
	}
	w := v
	w != data.a.c
}
` + long + "\n",
	}, {
		name: "line too long",
		src:  "package a.b\n\n" + long + "x\n" + long + "\n",
		want: []string{"3 " + lintLineLength},
	}, {
		name: "long line in a test module",
		src:  "package a.b_test\n\n" + long + "x\n",
		test: true,
	}, {
		name: "file too long",
		src:  "package a.b\n" + strings.Repeat("\n", lintMaxLines),
		want: []string{fmt.Sprint(lintMaxLines+1) + " " + lintFileLength},
	}, {
		name: "file at the limit",
		src:  "package a.b\n" + strings.Repeat("\n", lintMaxLines-2) + "x := 1\n",
	}, {
		name: "deny and warn without a code",
		src: `package a.b

deny contains "x" if true

# METADATA
# title: no code
# custom:
#   gate: b
warn contains "y" if true

# METADATA
# title: a code
# custom:
#   code: B_CODE
deny contains "z" if true

deny[k] := "w" if k := "k"

denied contains "v" if true
`,
		want: []string{"3 " + lintRuleCode, "9 " + lintRuleCode, "17 " + lintRuleCode},
	}, {
		name: "deny without a code in a test module",
		src:  "package a.b_test\n\ndeny contains \"x\" if true\n",
		test: true,
	}, {
		name: "import binds data",
		src:  "package a.b_test\n\nimport data.a.data\n\nx := data.deny\n",
		test: true,
		want: []string{"3 " + lintShadowData},
	}, {
		name: "import reported to data",
		src:  "package a.b\n\nimport data.a.b as data\n",
		want: []string{"3 " + lintShadowData},
	}, {
		name: "package ends in data",
		src:  "package a.data\n",
		want: []string{"1 " + lintShadowData},
	}, {
		name: "rule, argument and variables named data",
		src: `package a.b

data := 1

f(data) := 1

g if {
	data := 2
}

h if {
	some data in [1]
}

i if {
	some k, data in [1]
}
`,
		want: []string{
			"3 " + lintShadowData, "5 " + lintShadowData, "8 " + lintShadowData,
			"12 " + lintShadowData, "16 " + lintShadowData,
		},
	}, {
		name: "does not parse",
		src:  "package a.b\n\nx := \n",
		want: []string{"4 " + lintParse}, // at the end of the file
	}, {
		// OPA's parser rejects these: the lint reports them as it finds them
		name: "every over data",
		src:  "package a.b\n\nj if {\n\tevery data in [1] {\n\t\ttrue\n\t}\n}\n",
		want: []string{"4 " + lintParse},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range lintRego("m.rego", tc.src, tc.test) {
				got = append(got, fmt.Sprintf("%d %s", f.Line, f.Kind))
				t.Log(f)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("findings %q, want %q", got, tc.want)
			}
		})
	}
}
