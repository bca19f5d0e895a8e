package policy

import (
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
)

// reviewKeys says which member names of input.review.object the workload
// decision's input carries in input.review.keys ({name: true}, a name at
// any depth of the object). The rules for rare members (env, hostPath…)
// start with an input.review.keys test that OPA's rule index decides
// without evaluating them; only the names some rule tests are worth
// building and converting on every review, so the set is read from the
// bundle's modules once, at New.
type reviewKeys struct {
	// all: some rule reads input.review.keys, input.review or input
	// other than by constant member names, so every name is given.
	all   bool
	names map[string]bool
}

// readReviewKeys scans the modules the query reaches for reads of
// input.review.keys: the modules of the query's package and below, and
// transitively every module whose package one of them references (an
// import or a data reference; a reference to a package's ancestor, such as
// data.ito, reaches every package below it). Only a reference
// input.review.keys.<constant string> narrows the set; a read it cannot
// follow (input or input.review as a whole, a variable key at any of those
// steps, an import of input, a bare input) keeps every name, so a rule is
// never starved of a name it tests.
func readReviewKeys(b *bundle.Bundle, query string) reviewKeys {
	k := reviewKeys{names: map[string]bool{}}
	root, err := ast.ParseRef(query)
	if err != nil || len(root) < 2 {
		k.all = true
		return k
	}
	seen := map[*ast.Module]bool{}
	queue := []ast.Ref{root[:len(root)-1]} // the query's package
	for len(queue) > 0 {
		ref := queue[0]
		queue = queue[1:]
		for _, mf := range b.Modules {
			m := mf.Parsed
			if m == nil {
				k.all = true
				continue
			}
			if seen[m] || !(m.Package.Path.HasPrefix(ref) || ref.HasPrefix(m.Package.Path)) {
				continue
			}
			seen[m] = true
			k.scan(m)
			queue = append(queue, dataRefs(m)...)
		}
	}
	return k
}

// dataRefs is every reference to data in m, imports included, cut before
// its first non-constant step.
func dataRefs(m *ast.Module) []ast.Ref {
	var out []ast.Ref
	ast.WalkRefs(m, func(r ast.Ref) bool {
		if r.HasPrefix(ast.DefaultRootRef) {
			out = append(out, r.ConstantPrefix())
		}
		return false
	})
	for _, imp := range m.Imports {
		if r, ok := imp.Path.Value.(ast.Ref); ok && r.HasPrefix(ast.DefaultRootRef) {
			out = append(out, r.ConstantPrefix())
		}
	}
	return out
}

func (k *reviewKeys) scan(x any) {
	var visit func(x any) bool
	visit = func(x any) bool {
		switch x := x.(type) {
		case ast.Var:
			// A bare input (a ref's head is not visited: see Ref).
			if x.Equal(ast.InputRootDocument.Value) {
				k.all = true
			}
		case ast.Call:
			// object.get(input..., path, default) with a constant path is
			// the reference it names (the shipped rules read optional
			// members of input.review so).
			if r, ok := objectGetRef(x); ok {
				k.ref(r)
				for _, t := range x[2:] {
					ast.NewGenericVisitor(visit).Walk(t)
				}
				return true
			}
		case *ast.Expr:
			// The same call as an expression of its own.
			if terms, ok := x.Terms.([]*ast.Term); ok && len(x.With) == 0 {
				if r, ok := objectGetRef(ast.Call(terms)); ok {
					k.ref(r)
					for _, t := range terms[2:] {
						ast.NewGenericVisitor(visit).Walk(t)
					}
					return true
				}
			}
		case ast.Ref:
			if x.HasPrefix(ast.InputRootRef) {
				k.ref(x)
			} else {
				ast.NewGenericVisitor(visit).Walk(x[0])
			}
			for _, t := range x[1:] {
				ast.NewGenericVisitor(visit).Walk(t)
			}
			return true
		}
		return false
	}
	ast.NewGenericVisitor(visit).Walk(x)
}

// objectGetRef: call is object.get(R, P, default) where R is a reference
// into input with constant steps and P a constant string or an array whose
// leading members are constant strings; the reference R.P[...] it reads.
func objectGetRef(call ast.Call) (ast.Ref, bool) {
	op, ok := call[0].Value.(ast.Ref)
	if len(call) != 4 || !ok || !op.Equal(ast.ObjectGet.Ref()) {
		return nil, false
	}
	base, ok := call[1].Value.(ast.Ref)
	if !ok || !base.HasPrefix(ast.InputRootRef) || !base.IsGround() {
		return nil, false
	}
	r := base.Copy()
	switch p := call[2].Value.(type) {
	case ast.String:
		return append(r, call[2]), true
	case *ast.Array:
		for i := 0; i < p.Len(); i++ {
			if _, ok := p.Elem(i).Value.(ast.String); !ok {
				break
			}
			r = append(r, p.Elem(i))
		}
		// A path with no constant step is base itself, as a whole.
		return r, true
	}
	return nil, false
}

// ref records what input reference r reads of input.review.keys.
func (k *reviewKeys) ref(r ast.Ref) {
	for i, want := range []string{"review", "keys"} {
		if len(r) <= i+1 {
			k.all = true // input, input.review: the whole document
			return
		}
		s, ok := r[i+1].Value.(ast.String)
		if !ok {
			k.all = true // input[x], input.review[x]
			return
		}
		if string(s) != want {
			return // another part of input
		}
	}
	if len(r) < 4 {
		k.all = true // input.review.keys as a whole
		return
	}
	s, ok := r[3].Value.(ast.String)
	if !ok {
		k.all = true // input.review.keys[x]
		return
	}
	k.names[string(s)] = true
}

// of returns the member names of v at any depth that k keeps, as the set
// input.review.keys is.
func (k reviewKeys) of(v any) map[string]any {
	out := map[string]any{}
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for name, e := range x {
				if k.all || k.names[name] {
					out[name] = true
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}
