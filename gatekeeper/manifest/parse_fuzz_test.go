package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/gatekeeper/api"
)

// credentialLike are strings an error message must never echo: long, with a
// digit or a capital (keys and values are attacker-chosen; field names are
// lower-case words).
var credentialLike = regexp.MustCompile(`^.{12,}$`)

func looksSecret(s string) bool {
	if !credentialLike.MatchString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsDigit(r) || unicode.IsUpper(r) {
			return true
		}
	}
	return false
}

// strings collects every key and string value of v.
func collectStrings(v any, out *[]string) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			*out = append(*out, k)
			collectStrings(e, out)
		}
	case []any:
		for _, e := range t {
			collectStrings(e, out)
		}
	case string:
		*out = append(*out, t)
	}
}

// FuzzParse: manifest.Parse never panics; every refusal is a coded *Error
// whose message echoes no credential-like key or value of the input; every
// accepted document is exactly what encoding/json reads from the same bytes
// (no duplicate, case-variant or ambiguous member slipped through) and
// holds only numbers every float64 consumer reads alike. Seeds: the
// fixture manifests and testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	err := fs.WalkDir(fixtures.Manifests(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := fs.ReadFile(fixtures.Manifests(), p)
		f.Add(raw)
		return err
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		doc, err := Parse(raw)
		if err != nil {
			var me *Error
			if !errors.As(err, &me) {
				t.Fatalf("error %v (%T) is not a *manifest.Error", err, err)
			}
			switch me.Code {
			case api.CodeManifestMalformed, api.CodeManifestSchemaInvalid, api.CodeManifestTooLarge:
			default:
				t.Fatalf("unknown code %q", me.Code)
			}
			var loose any
			if json.Unmarshal(raw, &loose) == nil {
				var ss []string
				collectStrings(loose, &ss)
				for _, s := range ss {
					if looksSecret(s) && strings.Contains(me.Error(), s) {
						t.Fatalf("message %q echoes %q from the input", me.Error(), s)
					}
				}
			}
			return
		}
		// Accepted: encoding/json must read the very same document.
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var std any
		if err := dec.Decode(&std); err != nil {
			t.Fatalf("accepted bytes encoding/json refuses: %v", err)
		}
		if !reflect.DeepEqual(any(doc), std) {
			t.Fatalf("Parse and encoding/json read different documents:\n%v\n%v", doc, std)
		}
		checkNumbers(t, doc)
	})
}

// checkNumbers fails on a number a float64 reader would turn into an
// infinity or a zero that is not one.
func checkNumbers(t *testing.T, v any) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			checkNumbers(t, e)
		}
	case []any:
		for _, e := range x {
			checkNumbers(t, e)
		}
	case json.Number:
		fl, err := strconv.ParseFloat(string(x), 64)
		if err != nil || math.IsInf(fl, 0) {
			t.Fatalf("accepted number %s is beyond float64", x)
		}
		if fl == 0 && strings.Trim(strings.SplitN(strings.ToLower(string(x)), "e", 2)[0], "-0.") != "" {
			t.Fatalf("accepted number %s underflows to zero", x)
		}
	}
}
