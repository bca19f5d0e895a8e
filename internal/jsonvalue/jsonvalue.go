// Package jsonvalue holds what every package that edits a decoded JSON
// document needs alike.
package jsonvalue

// Clone is a deep copy of a JSON-shaped value: objects (map[string]any)
// and arrays ([]any) are copied at every depth, so the copy can be edited
// without touching v; every other value (string, json.Number, float64,
// int64, bool, nil) is immutable and shared.
func Clone(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = Clone(e)
		}
		return m
	case []any:
		a := make([]any, len(t))
		for i, e := range t {
			a[i] = Clone(e)
		}
		return a
	default:
		return v
	}
}
