// Package strictjson decodes untrusted JSON so that Go and Rego can never see
// different values for the same document.
//
// encoding/json accepts duplicate object keys (the last wins), silently
// replaces invalid UTF-8 with U+FFFD and matches struct fields case-
// insensitively. A policy engine that re-reads the same bytes may resolve such
// ambiguities differently, so every ambiguity is an error here: duplicate keys,
// keys equal under Unicode case folding, invalid UTF-8, numbers beyond the
// float64 range, nesting deeper than a bound and trailing data after the
// value. Error messages name JSON paths whose keys look like field names;
// any other key is withheld.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultMaxDepth bounds object/array nesting. Real manifests nest about five
// levels; the bound keeps hostile documents from exhausting the stack.
const DefaultMaxDepth = 32

// ErrInvalid is wrapped by every decoding error; messages name a JSON path,
// never a value (values may hold credentials).
var ErrInvalid = errors.New("invalid json")

// Decode parses exactly one JSON value from data. Numbers are returned as
// json.Number so integers stay exact; objects are map[string]any and arrays
// []any. maxDepth <= 0 means DefaultMaxDepth.
func Decode(data []byte, maxDepth int) (any, error) {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrInvalid)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, &jsonPath{}, 0, maxDepth)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: trailing data after the document", ErrInvalid)
	}
	return v, nil
}

// DecodeObject is Decode for documents that must be a JSON object.
func DecodeObject(data []byte, maxDepth int) (map[string]any, error) {
	v, err := Decode(data, maxDepth)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: document is not an object", ErrInvalid)
	}
	return obj, nil
}

// jsonPath is the path of the value being decoded, one segment per level
// below the document ($), rendered only when an error names it (building
// the path string for every member cost more than decoding the member).
type jsonPath []pathSeg

type pathSeg struct {
	key     string // a member's name (rendered through safeKey)
	index   int    // an array element's index, when isIndex
	isIndex bool
}

func (p *jsonPath) push(s pathSeg) { *p = append(*p, s) }
func (p *jsonPath) pop()           { *p = (*p)[:len(*p)-1] }

func (p *jsonPath) String() string {
	var b strings.Builder
	b.WriteString("$")
	for _, s := range *p {
		if s.isIndex {
			fmt.Fprintf(&b, "[%d]", s.index)
		} else {
			b.WriteString("." + safeKey(s.key))
		}
	}
	return b.String()
}

func decodeValue(dec *json.Decoder, p *jsonPath, depth, maxDepth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxErr(p.String(), err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth+1 > maxDepth {
			return nil, fmt.Errorf("%w: nesting deeper than %d at %s", ErrInvalid, maxDepth, p.String())
		}
		switch t {
		case '{':
			return decodeObject(dec, p, depth+1, maxDepth)
		case '[':
			return decodeArray(dec, p, depth+1, maxDepth)
		}
		return nil, fmt.Errorf("%w: unexpected %q at %s", ErrInvalid, t, p.String())
	case string:
		if hasLoneSurrogateEscape(t) {
			return nil, fmt.Errorf("%w: lone UTF-16 surrogate at %s", ErrInvalid, p.String())
		}
		return t, nil
	case json.Number:
		if beyondFloat64(string(t)) {
			return nil, fmt.Errorf("%w: number beyond the float64 range at %s", ErrInvalid, p.String())
		}
		return t, nil
	default: // bool, nil
		return t, nil
	}
}

func decodeObject(dec *json.Decoder, p *jsonPath, depth, maxDepth int) (map[string]any, error) {
	obj := map[string]any{}
	folded := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxErr(p.String(), err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("%w: object key expected at %s", ErrInvalid, p.String())
		}
		p.push(pathSeg{key: key})
		if _, dup := obj[key]; dup {
			return nil, fmt.Errorf("%w: duplicate key at %s", ErrInvalid, p.String())
		}
		fk := foldKey(key)
		if folded[fk] {
			return nil, fmt.Errorf("%w: key differs from another only by case at %s", ErrInvalid, p.String())
		}
		folded[fk] = true
		v, err := decodeValue(dec, p, depth, maxDepth)
		p.pop()
		if err != nil {
			return nil, err
		}
		obj[key] = v
	}
	if _, err := dec.Token(); err != nil { // closing '}'
		return nil, syntaxErr(p.String(), err)
	}
	return obj, nil
}

func decodeArray(dec *json.Decoder, p *jsonPath, depth, maxDepth int) ([]any, error) {
	arr := []any{}
	for i := 0; dec.More(); i++ {
		p.push(pathSeg{index: i, isIndex: true})
		v, err := decodeValue(dec, p, depth, maxDepth)
		p.pop()
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
	}
	if _, err := dec.Token(); err != nil { // closing ']'
		return nil, syntaxErr(p.String(), err)
	}
	return arr, nil
}

// beyondFloat64 reports a number literal that overflows float64 (1e400) or
// underflows to zero although it is not zero (1e-400). Go keeps the literal
// exactly and so does OPA, but most consumers of the same bytes (Python,
// JavaScript, encoding/json into float64) read infinity, zero or an error:
// the I-JSON profile (RFC 7493 §2.2) refuses such numbers, and so do we.
func beyondFloat64(n string) bool {
	f, err := strconv.ParseFloat(n, 64)
	if err != nil {
		return true
	}
	if f != 0 {
		return false
	}
	mantissa := n
	if i := strings.IndexAny(n, "eE"); i >= 0 {
		mantissa = n[:i]
	}
	return strings.ContainsAny(mantissa, "123456789")
}

// hasLoneSurrogateEscape reports U+FFFD produced by decoding a lone surrogate
// escape (\ud800). utf8.Valid has already refused raw invalid bytes, so a
// replacement character here came from an escape Go and other parsers treat
// differently.
func hasLoneSurrogateEscape(s string) bool {
	return strings.ContainsRune(s, utf8.RuneError)
}

// foldKey is key under Unicode simple case folding: foldKey(a) ==
// foldKey(b) exactly when strings.EqualFold(a, b), which is how
// encoding/json matches member names to struct fields. strings.ToLower is
// not enough: "\u017f" (long s) folds to "s" and "\u212a" (Kelvin) to "k".
//
// An ASCII key folds to its ASCII upper case: the least rune of each ASCII
// letter's fold orbit is its capital ('k', 'K' and U+212A fold to 'K'; 's',
// 'S' and U+017F to 'S'), every other ASCII rune folds to itself.
func foldKey(key string) string {
	ascii, lower := true, false
	for i := range len(key) {
		c := key[i]
		ascii = ascii && c < utf8.RuneSelf
		lower = lower || 'a' <= c && c <= 'z'
	}
	if ascii {
		if !lower {
			return key
		}
		b := []byte(key)
		for i, c := range b {
			if 'a' <= c && c <= 'z' {
				b[i] = c - ('a' - 'A')
			}
		}
		return string(b)
	}
	var b strings.Builder
	b.Grow(len(key))
	for _, r := range key {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// fieldName is what a member name of our documents looks like. Only such
// names are echoed in error paths: a key is attacker-chosen and may itself
// be a credential or a token ({"AKIA…": 1}), and credentials almost always
// carry digits or capitals (the manifest package withholds the same names).
var fieldName = regexp.MustCompile(`^[a-z][a-z_]{0,39}$`)

// safeKey renders a key for an error path: a field name, or a placeholder;
// never a value, never an arbitrary key.
func safeKey(k string) string {
	if !fieldName.MatchString(k) {
		return "<key not shown>"
	}
	return k
}

func syntaxErr(path string, err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: unexpected end of input at %s", ErrInvalid, path)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("%w: syntax error at byte %d (%s)", ErrInvalid, se.Offset, path)
	}
	return fmt.Errorf("%w: %s", ErrInvalid, path)
}
