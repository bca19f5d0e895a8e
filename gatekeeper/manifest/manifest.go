// Package manifest decodes and validates training manifests
// (schema "ito.training/v1", schemas/manifest.v1.json).
//
// The JSON Schema in schemas/manifest.v1.json is the source of truth;
// it is compiled once and every manifest is decoded strictly (see strictjson)
// before it is validated, so the document the policy sees is exactly the one
// whose digest was signed.
package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/strictjson"
	"github.com/itocompute/itogate/schemas"
)

// MaxBytes is the largest manifest accepted: 1 MiB.
const MaxBytes = 1 << 20

// The codes of *Error are api.CodeManifestTooLarge, CodeManifestMalformed,
// CodeManifestSchemaInvalid and CodeManifestLimitExceeded: a list or a
// string longer than the schema's maxItems or maxLength (datasets, eval
// gates, URIs, names). Those bounds keep every manifest the schema accepts
// decidable well within the policy deadline (docs/performance.md); the same
// manifest never passes on a retry.

// Error is a manifest that cannot be used. Message names JSON paths and schema
// keywords only, never values, because a value may be a credential.
type Error struct {
	Code    api.Code
	Message string
	Err     error
}

func (e *Error) Error() string { return "manifest: " + e.Message }
func (e *Error) Unwrap() error { return e.Err }

// Digest returns "sha256:<64 lowercase hex>" over the exact bytes.
func Digest(raw []byte) string {
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

var (
	schemaOnce sync.Once
	schema     *jsonschema.Schema
	schemaErr  error
)

func compiled() (*jsonschema.Schema, error) {
	schemaOnce.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemas.Manifest()))
		if err != nil {
			schemaErr = fmt.Errorf("manifest: schema: %w", err)
			return
		}
		c := jsonschema.NewCompiler()
		const url = "https://itogate.dev/schemas/manifest.v1.json"
		if err := c.AddResource(url, doc); err != nil {
			schemaErr = fmt.Errorf("manifest: schema: %w", err)
			return
		}
		schema, schemaErr = c.Compile(url)
	})
	return schema, schemaErr
}

// Parse decodes raw strictly and validates it against the manifest schema.
// The result is the document as Go values (objects map[string]any, numbers
// json.Number) ready to become policy input. Errors are *Error.
func Parse(raw []byte) (map[string]any, error) {
	if len(raw) > MaxBytes {
		return nil, &Error{Code: api.CodeManifestTooLarge, Message: fmt.Sprintf("larger than %d bytes", MaxBytes)}
	}
	doc, err := strictjson.DecodeObject(raw, 0)
	if err != nil {
		return nil, &Error{Code: api.CodeManifestMalformed, Message: err.Error(), Err: err}
	}
	sch, err := compiled()
	if err != nil {
		return nil, err
	}
	if err := sch.Validate(any(doc)); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			code := api.CodeManifestSchemaInvalid
			if exceedsLimit(ve) {
				code = api.CodeManifestLimitExceeded
			}
			return nil, &Error{Code: code, Message: describe(ve), Err: err}
		}
		return nil, &Error{Code: api.CodeManifestSchemaInvalid, Message: "does not match the schema", Err: err}
	}
	return doc, nil
}

// exceedsLimit reports whether a leaf failure is a size bound: maxItems,
// maxLength or maxProperties.
func exceedsLimit(ve *jsonschema.ValidationError) bool {
	if len(ve.Causes) == 0 {
		switch ve.ErrorKind.(type) {
		case *kind.MaxItems, *kind.MaxLength, *kind.MaxProperties:
			return true
		}
		return false
	}
	for _, c := range ve.Causes {
		if exceedsLimit(c) {
			return true
		}
	}
	return false
}

// describe lists up to five leaf failures as "<json pointer>: <keyword>".
func describe(ve *jsonschema.ValidationError) string {
	var leaves []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, leaf(e))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	sort.Strings(leaves)
	leaves = dedupe(leaves)
	if len(leaves) > 5 {
		leaves = append(leaves[:5], fmt.Sprintf("and %d more", len(leaves)-5))
	}
	return "does not match the schema: " + strings.Join(leaves, "; ")
}

func leaf(e *jsonschema.ValidationError) string {
	where := "/" + strings.Join(e.InstanceLocation, "/")
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		return fmt.Sprintf("%s: missing %s", where, names(k.Missing))
	case *kind.AdditionalProperties:
		return fmt.Sprintf("%s: unknown field %s", where, names(k.Properties))
	case *kind.Type:
		return fmt.Sprintf("%s: want %s", where, strings.Join(k.Want, " or "))
	}
	kp := e.ErrorKind.KeywordPath()
	if len(kp) == 0 {
		return where + ": invalid"
	}
	return fmt.Sprintf("%s: fails %q", where, kp[len(kp)-1])
}

// fieldName is what a schema field name looks like. Only such names are
// echoed: a key is attacker-chosen and may itself be a credential
// ("AKIA…": {}), and credentials almost always carry digits or capitals.
var fieldName = regexp.MustCompile(`^[a-z][a-z_]{0,39}$`)

// names quotes field names that look like field names and withholds others.
func names(ns []string) string {
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		if !fieldName.MatchString(n) {
			out = append(out, "(a name not shown)")
			continue
		}
		out = append(out, fmt.Sprintf("%q", n))
	}
	return strings.Join(out, ", ")
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
