package trainfacts

import (
	"slices"

	"github.com/itocompute/itogate/internal/regonum"
)

// The field check: policies/ito/manifest (its facts.rego). Each field the
// gates compute with (data.ito.config.manifest.fields: a path and a kind)
// is looked up in the manifest as written, and the ones whose value is not
// of their kind are input.facts.manifest.invalid_fields, in the bundle's
// order; the gate denies each (MANIFEST_FIELD_INVALID) with its message.

// fieldKind tests a value, as decoded JSON (json.Number for numbers), the
// way the reference's _is_kind body of that kind does.
type fieldKind func(x any) bool

// fieldKinds are the kinds written as formulas (a kind of kind_values is
// a list in the bundle instead). A field of a kind that is both passes
// when either holds, as the reference's rule bodies do.
var fieldKinds = map[string]fieldKind{
	"count":          func(x any) bool { return count(x, true).Defined() },
	"optional_count": func(x any) bool { return x == nil || count(x, true).Defined() },
	"string": func(x any) bool {
		s, ok := x.(string)
		return ok && s != ""
	},
	"positive_number": func(x any) bool {
		return x == nil || regonum.Greater(num(x, true), regonum.Int(0))
	},
	"datasets": func(x any) bool {
		a, ok := x.([]any)
		return ok && len(a) > 0 && !slices.ContainsFunc(a, func(d any) bool {
			_, isObj := d.(map[string]any)
			return !isObj
		})
	},
	"array": func(x any) bool {
		_, ok := x.([]any)
		return ok || x == nil
	},
	"layer_counts": func(x any) bool {
		if x == nil {
			return true
		}
		a, ok := x.([]any)
		return ok && !slices.ContainsFunc(a, func(e any) bool {
			n := num(e, true)
			return !regonum.GreaterEq(n, regonum.Int(0)) || !regonum.Equal(n, regonum.Floor(n))
		})
	},
	"optional_object": func(x any) bool {
		_, ok := x.(map[string]any)
		return ok || x == nil
	},
}

// manifestField is one entry of data.ito.config.manifest.fields.
type manifestField struct {
	path   []string
	kind   string
	fact   map[string]any // {path, kind}, as the reference writes it
	formal fieldKind      // nil unless the kind is one of fieldKinds
	values []any          // the kind's kind_values, if any
}

// readManifest reads data.ito.config.manifest: fields, each {"path": [name,
// ...], "kind": k}, and kind_values, kind → the JSON scalars a field of that
// kind may hold. A field whose kind is neither a formula kind nor a key of
// kind_values is refused (nothing says what it holds), as is a value in
// kind_values that is not a string, number, boolean or null. Without a field
// list nothing is checked here; the manifest gate denies that ("not checked").
func (m *Model) readManifest(r *reader, cfg map[string]any) {
	if r.err != nil {
		return
	}
	values := r.obj(cfg, "kind_values")
	lists := make(map[string][]any, len(values))
	for kind, v := range values {
		list, ok := v.([]any)
		if !ok {
			r.fail("manifest.kind_values[%s] is not an array", kind)
			return
		}
		for _, x := range list {
			switch x.(type) {
			case nil, bool, string:
			default:
				if _, isNum := regonum.Of(x); !isNum {
					r.fail("manifest.kind_values[%s] holds a value that is not a string, number, boolean or null", kind)
					return
				}
			}
		}
		lists[kind] = list
	}
	m.stages = lists["stage"]
	// (a fields value that is not an array fails r and reads as none)
	for i, f := range r.arr(cfg, "fields", "manifest.fields") {
		o, _ := f.(map[string]any)
		kind, okKind := o["kind"].(string)
		steps, okPath := o["path"].([]any)
		if !okKind || !okPath {
			r.fail("manifest.fields[%d] has no kind or no path", i)
			return
		}
		mf := manifestField{kind: kind, formal: fieldKinds[kind], values: lists[kind]}
		if _, listed := lists[kind]; mf.formal == nil && !listed {
			r.fail("manifest.fields[%d] has kind %q, neither a formula kind nor one of kind_values", i, kind)
			return
		}
		for _, s := range steps {
			name, ok := s.(string)
			if !ok {
				r.fail("manifest.fields[%d] has a path step that is not a string", i)
				return
			}
			mf.path = append(mf.path, name)
		}
		mf.fact = map[string]any{"path": steps, "kind": kind}
		m.fields = append(m.fields, mf)
	}
}

// invalidFields is input.facts.manifest for the manifest as written:
// {"invalid_fields": [{path, kind}, ...]}, the bundle's fields whose value
// (null when absent or below a value that is not an object) is not of
// their kind; then, for each stage of kind_values.stage (in that order)
// that has stage_settings, settings that are not an object (path
// stage_settings/<stage>, kind optional_object) or the fields that are of
// their kind in the manifest and not in the stage's effective manifest
// (StageManifest), under stage_settings/<stage>: the stage is judged on
// that manifest when it is entered.
func (m *Model) invalidFields(manifest any) map[string]any {
	invalid := []any{}
	for _, f := range m.fields {
		if !f.holds(valueAt(manifest, f.path)) {
			invalid = append(invalid, f.fact)
		}
	}
	settings, hasSettings := objAt(manifest, "stage_settings")
	for _, stage := range m.stages {
		name, isName := stage.(string)
		s, ok := settings[name]
		if !hasSettings || !isName || !ok {
			continue
		}
		prefix := []any{"stage_settings", name}
		if _, isObj := s.(map[string]any); !isObj {
			invalid = append(invalid, map[string]any{"path": prefix, "kind": "optional_object"})
			continue
		}
		effective := StageManifest(manifest.(map[string]any), name)
		for _, f := range m.fields {
			if !f.holds(valueAt(effective, f.path)) && f.holds(valueAt(manifest, f.path)) {
				path := append(slices.Clip(prefix), f.fact["path"].([]any)...)
				invalid = append(invalid, map[string]any{"path": path, "kind": f.kind})
			}
		}
	}
	return map[string]any{"invalid_fields": invalid}
}

// valueAt is the value at path below v, nil when absent or below a value
// that is not an object (lib.value_at with default null).
func valueAt(v any, path []string) any {
	x, ok := at(v, path...)
	if !ok {
		return nil
	}
	return x
}

func (f *manifestField) holds(x any) bool {
	if f.formal != nil && f.formal(x) {
		return true
	}
	return slices.ContainsFunc(f.values, func(v any) bool { return sameScalar(x, v) })
}

// sameScalar is Rego's x == v for a scalar v of kind_values: numbers by
// value (1.0 is 1), anything else by type and value.
func sameScalar(x, v any) bool {
	if vn, isNum := regonum.Of(v); isNum {
		xn, ok := regonum.Of(x)
		return ok && regonum.Equal(xn, vn)
	}
	switch v := v.(type) {
	case nil:
		return x == nil
	case bool:
		b, ok := x.(bool)
		return ok && b == v
	case string:
		s, ok := x.(string)
		return ok && s == v
	}
	return false
}
