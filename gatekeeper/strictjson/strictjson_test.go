package strictjson

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestDecodeRefusesAmbiguity(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", 40) + strings.Repeat("]", 40)
	cases := []struct {
		name, in, want string
	}{
		{"duplicate key", `{"a":1,"a":2}`, "duplicate key at $.a"},
		{"nested duplicate", `{"x":{"b":true,"b":false}}`, "duplicate key at $.x.b"},
		{"case-variant key", `{"Model":1,"model":2}`, "differs from another only by case at $.model"},
		{"escaped duplicate", `{"a":1,"\u0061":2}`, "duplicate key at $.a"},
		{"invalid utf-8", "{\"a\":\"\xff\"}", "not valid UTF-8"},
		{"lone surrogate", `{"a":"\ud800"}`, "lone UTF-16 surrogate at $.a"},
		{"too deep", deep, "nesting deeper than 32"},
		{"trailing data", `{"a":1} {"a":2}`, "trailing data"},
		{"truncated", `{"a":`, "unexpected end of input"},
		{"not an object key", `{1:2}`, "syntax error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.in), 0)
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode(%q) = %v, want error containing %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestDecodeKeepsExactNumbers(t *testing.T) {
	t.Parallel()
	v, err := DecodeObject([]byte(`{"p":405900000000,"big":123456789012345678901234567890,"f":2.49,"s":"x","n":null,"b":true,"a":[1]}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := v["big"].(json.Number).String(); got != "123456789012345678901234567890" {
		t.Fatalf("big = %s", got)
	}
	if got := v["f"].(json.Number).String(); got != "2.49" {
		t.Fatalf("f = %s", got)
	}
	if v["n"] != nil || v["b"] != true || v["s"] != "x" || len(v["a"].([]any)) != 1 {
		t.Fatalf("decoded %v", v)
	}
}

func TestErrorsNeverEchoValues(t *testing.T) {
	t.Parallel()
	secret := "AKIAIOSFODNN7EXAMPLE"
	_, err := Decode([]byte(`{"k":"`+secret+`","k":"`+secret+`"}`), 0)
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("error %v must not contain the value", err)
	}
}

func TestDecodeObjectRefusesNonObject(t *testing.T) {
	t.Parallel()
	if _, err := DecodeObject([]byte(`[1,2]`), 0); err == nil || !strings.Contains(err.Error(), "not an object") {
		t.Fatalf("got %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,2,{"b":null}]}`, `{"a":1,"a":2}`, `"\ud800"`, `[[[[]]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := Decode(data, 0); err != nil {
			return
		}
		// Whatever strictjson accepts is valid JSON to encoding/json too.
		if !json.Valid(data) {
			t.Fatalf("strictjson accepted invalid JSON %q", data)
		}
	})
}
