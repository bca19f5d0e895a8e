package policy

import (
	"encoding/json"
	"errors"
	"sync"

	"github.com/itocompute/itogate/schemas"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/util"
)

// maxInputDepth bounds the nesting inputValue converts: encoding/json's own
// limit, so no decoded document is refused, and a cyclic Go value fails
// instead of recursing without end.
const maxInputDepth = 10000

var errInputDepth = errors.New("input nested deeper than 10000 levels (or cyclic)")

// inputValue is x as OPA's value: exactly what rego.EvalInput evaluates
// for x (a JSON-shaped copy, util.RoundTripFast, then
// ast.InterfaceToValue), built without the copy. Objects and arrays are
// built in one block of terms each; object keys and the string values the
// input schema names (its property names and enums) share one term per
// name, made once. Values of another Go type than JSON's (float64, structs,
// typed slices) take the same JSON round trip as there, util.RoundTrip.
func inputValue(x any) (ast.Value, error) {
	return convert(x, 0)
}

func convert(x any, depth int) (ast.Value, error) {
	switch v := x.(type) {
	case map[string]any:
		if v == nil {
			return ast.NullValue, nil
		}
		if depth >= maxInputDepth {
			return nil, errInputDepth
		}
		terms := make([]ast.Term, 0, len(v)) // the values; never grown, so &terms[i] stays
		items := make([][2]*ast.Term, 0, len(v))
		for k, e := range v {
			ev, err := convert(e, depth+1)
			if err != nil {
				return nil, err
			}
			terms = append(terms, ast.Term{Value: ev})
			items = append(items, [2]*ast.Term{keyTerm(k), &terms[len(terms)-1]})
		}
		return ast.NewObject(items...), nil
	case []any:
		if v == nil {
			return ast.NullValue, nil
		}
		if depth >= maxInputDepth {
			return nil, errInputDepth
		}
		terms := make([]ast.Term, len(v))
		ptrs := make([]*ast.Term, len(v))
		for i, e := range v {
			ev, err := convert(e, depth+1)
			if err != nil {
				return nil, err
			}
			terms[i].Value = ev
			ptrs[i] = &terms[i]
		}
		return ast.NewArray(ptrs...), nil
	case string:
		if t, ok := names()[v]; ok {
			return t.Value, nil
		}
		return ast.InterfaceToValue(v)
	case nil, bool, json.Number, int, int64:
		// as InterfaceToValue reads them: RoundTripFast leaves nil, bool
		// and json.Number as they are, and writes int and int64 as the
		// json.Number of their decimal form, the same number
		return ast.InterfaceToValue(v)
	}
	y := x
	if err := util.RoundTrip(&y); err != nil {
		return nil, err
	}
	return convert(y, depth)
}

// keyTerm is the term of an object key: the shared one for a name of the
// input schema, else a new string term.
func keyTerm(k string) *ast.Term {
	if t, ok := names()[k]; ok {
		return t
	}
	return ast.StringTerm(k)
}

// names are the input schema's property names and enum and const strings
// (schemas/input.json, which holds input.facts too, and the manifest
// schema), each as one term shared by every input: read-only, as OPA's own
// interned terms are.
var names = sync.OnceValue(func() map[string]*ast.Term {
	out := map[string]*ast.Term{}
	var walk func(x any)
	add := func(s string) {
		if _, ok := out[s]; !ok {
			out[s] = ast.StringTerm(s)
		}
	}
	walk = func(x any) {
		switch v := x.(type) {
		case map[string]any:
			if props, ok := v["properties"].(map[string]any); ok {
				for k := range props {
					add(k)
				}
			}
			if enum, ok := v["enum"].([]any); ok {
				for _, e := range enum {
					if s, ok := e.(string); ok {
						add(s)
					}
				}
			}
			if c, ok := v["const"].(string); ok {
				add(c)
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	for _, doc := range [][]byte{schemas.Input(), schemas.Manifest()} {
		var x any
		if err := json.Unmarshal(doc, &x); err == nil {
			walk(x)
		}
	}
	return out
})
