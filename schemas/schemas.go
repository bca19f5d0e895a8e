// Package schemas embeds itogate's JSON Schemas (draft 2020-12):
//
//	manifest.v1.json  the training manifest (apiVersion ito.training/v1), the
//	                  source of truth for every manifest field
//	input.json        the policy input document (docs/policy-input.md); its
//	                  $defs/manifest is a verbatim copy of manifest.v1.json
//
// They live outside policies/ on purpose: OPA loads every .json file under a
// path it is given as data, so schemas inside the policy tree would be merged
// into data.schemas (and conflict with each other) whenever a reviewer runs
// `opa test policies/`. Pass them to OPA as files:
// `opa check --strict --schema schemas/input.json policies`.
package schemas

import (
	"embed"
	"io/fs"
)

//go:embed *.json
var files embed.FS

// FS returns the schema files: manifest.v1.json and input.json.
func FS() fs.FS { return files }

// Manifest returns the training manifest JSON Schema (ito.training/v1).
func Manifest() []byte { return mustRead("manifest.v1.json") }

// Input returns the JSON Schema of the policy input document. Its
// $defs/manifest is an exact copy of Manifest (kept so by a test).
func Input() []byte { return mustRead("input.json") }

func mustRead(name string) []byte {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err) // embedded at build time
	}
	return b
}
