package strictjson

import (
	"errors"
	"strings"
	"testing"
	"unicode"
)

// foldRef is foldKey without its ASCII fast path: each rune replaced by the
// least rune of its simple-fold orbit.
func foldRef(key string) string {
	var b strings.Builder
	for _, r := range key {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// TestFoldKeyASCIIFastPath: for every ASCII key of one or two bytes, and
// keys mixing ASCII with the non-ASCII runes that fold into ASCII letters,
// foldKey equals the orbit definition and agrees with strings.EqualFold.
func TestFoldKeyASCIIFastPath(t *testing.T) {
	var keys []string
	for a := range 128 {
		keys = append(keys, string(rune(a)))
		for b := range 128 {
			keys = append(keys, string([]byte{byte(a), byte(b)}))
		}
	}
	keys = append(keys, "model", "Model", "MODEL", "gpu_type", "\u017fize", "size", "\u212aey", "key", "Key")
	for _, k := range keys {
		if got, want := foldKey(k), foldRef(k); got != want {
			t.Fatalf("foldKey(%q) = %q, want %q", k, got, want)
		}
	}
	for _, pair := range [][2]string{{"size", "\u017fize"}, {"key", "\u212aey"}, {"a_b", "A_B"}, {"a1", "A1"}} {
		if foldKey(pair[0]) != foldKey(pair[1]) || !strings.EqualFold(pair[0], pair[1]) {
			t.Errorf("%q and %q: folds %q %q", pair[0], pair[1], foldKey(pair[0]), foldKey(pair[1]))
		}
	}
	for _, pair := range [][2]string{{"a_b", "a-b"}, {"[", "{"}, {"@", "`"}} {
		if foldKey(pair[0]) == foldKey(pair[1]) {
			t.Errorf("%q and %q fold alike", pair[0], pair[1])
		}
	}
}

// TestErrorPathsThroughArrays: the path an error names, built only on
// error, runs through array indexes and nested members, and withholds keys
// that are not field names.
func TestErrorPathsThroughArrays(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":[1,{"b":{"c":1,"c":2}}]}`:               "invalid json: duplicate key at $.a[1].b.c",
		`{"a":[[0],[1,"\ud800"]]}`:                    "invalid json: lone UTF-16 surrogate at $.a[1][1]",
		`{"AKIA1":{"x":1e400}}`:                       "invalid json: number beyond the float64 range at $.<key not shown>.x",
		`{"a":{"b":1},"c":[{"d":1},{"Dd":1,"dD":2}]}`: "invalid json: key differs from another only by case at $.c[1].<key not shown>",
	} {
		_, err := Decode([]byte(in), 0)
		if err == nil || !errors.Is(err, ErrInvalid) || err.Error() != want {
			t.Errorf("Decode(%s) = %v, want %q", in, err, want)
		}
	}
}
