package strictjson

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestDecodeRefusesUnicodeCaseFolds: keys equal under Unicode simple case
// folding — what encoding/json uses to match member names — are ambiguous,
// not only ASCII case variants: "ſ" (U+017F) folds to "s", "K" (U+212A,
// Kelvin) to "k".
func TestDecodeRefusesUnicodeCaseFolds(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		`{"schema":1,"\u017fchema":2}`,
		`{"\u017fchema":1,"SCHEMA":2}`,
		`{"kid":1,"\u212aid":2}`,
		`{"idempotency_key":1,"idempotency_\u212aey":2}`,
		`{"a":{"x\u017f":1,"XS":2}}`,
	} {
		_, err := Decode([]byte(in), 0)
		if err == nil || !strings.Contains(err.Error(), "only by case") {
			t.Errorf("Decode(%s) = %v, want a case-fold refusal", in, err)
		}
	}
	// Why: encoding/json matches "ſchema" to a field named "schema".
	var dst struct {
		Schema int `json:"schema"`
	}
	if err := json.Unmarshal([]byte(`{"\u017fchema":7}`), &dst); err != nil || dst.Schema != 7 {
		t.Errorf("encoding/json no longer folds U+017F: %v %d", err, dst.Schema)
	}
	// Distinct keys that merely look alike stay distinct.
	if _, err := Decode([]byte(`{"i":1,"\u0131":2,"s":3,"\u00df":4}`), 0); err != nil {
		t.Errorf("dotless i / sharp s: %v", err)
	}
}

// TestDecodeRefusesNumbersBeyondFloat64: a literal that overflows float64
// or underflows to zero while not being zero reads differently in
// different consumers (Python inf, encoding/json error, OPA exact).
func TestDecodeRefusesNumbersBeyondFloat64(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"1e400", "-1e400", "1e-400", "-2.5e-330", "1.8e308", "0.000001e-330"} {
		if _, err := Decode([]byte(`{"n":`+n+`}`), 0); err == nil || !strings.Contains(err.Error(), "float64 range at $.n") {
			t.Errorf("%s: %v", n, err)
		}
	}
	for _, n := range []string{"0", "-0", "0e-400", "0.0e999", "1e308", "5e-324", "123456789012345678901234567890", "2.49"} {
		if _, err := Decode([]byte(`{"n":`+n+`}`), 0); err != nil {
			t.Errorf("%s refused: %v", n, err)
		}
	}
}

// TestErrorsNeverEchoArbitraryKeys: error paths show member names that look
// like field names and withhold any other key, which may be a credential or
// a token an author put in the wrong place.
func TestErrorsNeverEchoArbitraryKeys(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{"AKIAIOSFODNN7EXAMPLE", "eyJhbGciOiJFUzI1NiJ9", "ghp_0123456789abcdefABCDEF", "hunter2"} {
		for _, in := range []string{
			`{"` + secret + `":1,"` + secret + `":2}`,
			`{"` + secret + `":{"a":1,"a":2}}`,
			`{"` + secret + `":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`,
			`{"` + secret + `":"\ud800"}`,
		} {
			_, err := Decode([]byte(in), 0)
			if err == nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode(%s) = %v", in, err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q echoes the key", err)
			}
		}
	}
	_, err := Decode([]byte(`{"model":{"kv_heads":1,"kv_heads":2}}`), 0)
	if err == nil || !strings.Contains(err.Error(), "$.model.kv_heads") {
		t.Errorf("field names are still shown: %v", err)
	}
}
