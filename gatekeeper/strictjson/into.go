package strictjson

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Base64Error is Into's error for a []byte member that is not standard
// base64 (RFC 4648 §4, padded, no line breaks).
type Base64Error struct{ Field string }

func (e *Base64Error) Error() string {
	return e.Field + " must be standard base64 (RFC 4648 §4)"
}

// Into copies the members of obj (from DecodeObject) into the struct *dst,
// matching each member to the field whose json tag names it exactly: unlike
// encoding/json, "Action" is not "action", so the struct's tags are the one
// spelling of the wire contract. It refuses an unknown member (named only
// when it looks like a field name: a key may be a credential) and a member
// of the wrong type. Field kinds: string (and named string types), bool,
// int64 (an integer JSON number), []string (at most maxList entries),
// []byte (standard base64, *Base64Error) and a pointer to string, bool or
// int64: set when the member is present, so an explicit 0 or "" is told
// apart from an absent member, which leaves it nil (null is refused like
// any other wrong type). Members are checked in name
// order, so the error a request gets does not depend on map order; a
// base64 member is decoded after every other member passed.
func Into(obj map[string]any, dst any, maxList int) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return errors.New("strictjson: Into needs a pointer to a struct")
	}
	v = v.Elem()
	idx := fieldIndex(v.Type())
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var later []string
	for _, k := range keys {
		i, ok := idx[k]
		if !ok {
			return fmt.Errorf("unknown field %s", quoteKey(k))
		}
		f := v.Field(i)
		if f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Uint8 {
			if _, ok := obj[k].(string); !ok {
				return fmt.Errorf("field %q must be a string", k)
			}
			later = append(later, k)
			continue
		}
		if err := set(f, k, obj[k], maxList); err != nil {
			return err
		}
	}
	for _, k := range later {
		s := obj[k].(string)
		// Go's decoder skips \r and \n even in strict mode; RFC 4648 §4
		// text has none, so one value has exactly one encoding.
		b, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil || strings.ContainsAny(s, "\r\n") {
			return &Base64Error{Field: k}
		}
		v.Field(idx[k]).SetBytes(b)
	}
	return nil
}

func set(f reflect.Value, k string, val any, maxList int) error {
	switch f.Kind() {
	case reflect.Pointer:
		switch f.Type().Elem().Kind() {
		case reflect.String, reflect.Bool, reflect.Int64:
		default:
			return fmt.Errorf("strictjson: field %q has a kind Into does not decode", k)
		}
		p := reflect.New(f.Type().Elem())
		if err := set(p.Elem(), k, val, maxList); err != nil {
			return err
		}
		f.Set(p)
	case reflect.String:
		s, ok := val.(string)
		if !ok {
			return fmt.Errorf("field %q must be a string", k)
		}
		f.SetString(s)
	case reflect.Bool:
		b, ok := val.(bool)
		if !ok {
			return fmt.Errorf("field %q must be a boolean", k)
		}
		f.SetBool(b)
	case reflect.Int64:
		n, ok := val.(json.Number)
		i, err := n.Int64()
		if !ok || err != nil {
			return fmt.Errorf("field %q must be an integer", k)
		}
		f.SetInt(i)
	case reflect.Slice:
		arr, ok := val.([]any)
		if !ok || len(arr) > maxList {
			return fmt.Errorf("field %q must be an array of at most %d strings", k, maxList)
		}
		out := make([]string, 0, len(arr))
		for _, e := range arr {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("field %q must be an array of strings", k)
			}
			out = append(out, s)
		}
		f.Set(reflect.ValueOf(out))
	default:
		return fmt.Errorf("strictjson: field %q has a kind Into does not decode", k)
	}
	return nil
}

var indexes sync.Map // reflect.Type → map[string]int

// fieldIndex maps each json tag name of t to its field index.
func fieldIndex(t reflect.Type) map[string]int {
	if m, ok := indexes.Load(t); ok {
		return m.(map[string]int)
	}
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			m[name] = i
		}
	}
	indexes.Store(t, m)
	return m
}

// quoteKey echoes an unknown key only when it looks like a field name.
func quoteKey(k string) string {
	if !fieldName.MatchString(k) {
		return "(a name not shown)"
	}
	return strconv.Quote(k)
}
