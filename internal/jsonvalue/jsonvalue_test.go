package jsonvalue

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestCloneIsDeep: the clone equals the original, and editing it at any
// depth leaves the original as it was.
func TestCloneIsDeep(t *testing.T) {
	orig := map[string]any{"a": []any{map[string]any{"b": json.Number("1")}, "s"}, "c": nil, "d": true}
	want := map[string]any{"a": []any{map[string]any{"b": json.Number("1")}, "s"}, "c": nil, "d": true}
	c := Clone(orig).(map[string]any)
	if !reflect.DeepEqual(c, orig) {
		t.Fatalf("clone %v, want %v", c, orig)
	}
	c["a"].([]any)[0].(map[string]any)["b"] = json.Number("2")
	c["a"].([]any)[1] = "t"
	c["e"] = 1
	if !reflect.DeepEqual(orig, want) {
		t.Fatalf("the original changed: %v", orig)
	}
}
