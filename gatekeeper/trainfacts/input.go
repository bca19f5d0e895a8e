package trainfacts

import (
	"github.com/itocompute/itogate/internal/regonum"
)

// input is the part of the policy input document the model reads, with
// Rego's reading of it: a path through anything but objects is undefined.
type input struct {
	doc      map[string]any
	manifest map[string]any // nil unless input.manifest is an object
}

func newInput(doc map[string]any) input {
	m, _ := doc["manifest"].(map[string]any)
	return input{doc: doc, manifest: m}
}

// at is the value at path below v, as a Rego reference v.a.b reads it.
func at(v any, path ...string) (any, bool) {
	for _, k := range path {
		o, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = o[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// objAt is the object at path below v (undefined unless it is one).
func objAt(v any, path ...string) (map[string]any, bool) {
	x, ok := at(v, path...)
	if !ok {
		return nil, false
	}
	o, ok := x.(map[string]any)
	return o, ok
}

// get is object.get(o, key, def): o must be an object (ok false otherwise,
// the call is undefined), a missing key gives def.
func get(o map[string]any, ok bool, key string, def any) (any, bool) {
	if !ok {
		return nil, false
	}
	if v, has := o[key]; has {
		return v, true
	}
	return def, true
}

// num is v as a number, undefined unless it is one.
func num(v any, ok bool) regonum.Num {
	if !ok {
		return regonum.Num{}
	}
	n, isNum := regonum.Of(v)
	if !isNum {
		return regonum.Num{}
	}
	return n
}

var one = regonum.Int(1)

// count is the policy's guard for a positive whole number (lib.is_count,
// parallelism._count): is_number(x), x >= 1, x == floor(x); x itself.
func count(v any, ok bool) regonum.Num {
	n := num(v, ok)
	if !regonum.GreaterEq(n, one) || !regonum.Equal(n, regonum.Floor(n)) {
		return regonum.Num{}
	}
	return n
}

// truthy is a Rego expression that is just a reference: defined and not false.
func truthy(v any, ok bool) bool {
	if !ok {
		return false
	}
	b, isBool := v.(bool)
	return !isBool || b
}

// str is v as a string.
func str(v any, ok bool) (string, bool) {
	if !ok {
		return "", false
	}
	s, isStr := v.(string)
	return s, isStr
}

// isNumber is is_number(v).
func isNumber(v any, ok bool) bool {
	return num(v, ok).Defined()
}

// put adds key = n to a facts object when n is defined.
func put(out map[string]any, key string, n regonum.Num) {
	if n.Defined() {
		out[key] = n.JSON()
	}
}
