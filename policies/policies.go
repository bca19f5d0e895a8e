// Package policies embeds itogate's admission policy: the Rego modules and
// bundle data under ito/. The JSON Schemas are in package schemas (the
// repository's top-level schemas/), outside the policy tree, so that
// `opa test policies/` loads no schema as data.
//
// Layout (OPA bundle convention: a data.json file's directory is its data path):
//
//	ito/<gate>/<gate>.rego        package ito.<gate>; gates: entitlement, confirmation,
//	                              idempotency, budget, booking, parallelism, manifest,
//	                              lifecycle, checkpoint, datachecks, rlvr
//	ito/datasets/datasets.rego    package ito.datasets; the data gate (a package named
//	                              data would shadow the root data document)
//	ito/admission/admission.rego  package ito.admission; the entrypoint
//	                              data.ito.admission.decision
//	ito/workload/*.rego           package ito.workload; the webhook's entrypoint
//	                              data.ito.workload.decision (workload.rego), counting
//	                              (count.rego, dra.rego), access.rego, change.rego
//	ito/lib/lib.rego              package ito.lib; shared helpers
//	ito/config/data.json          data.ito.config (thresholds, prices, allow-lists)
//	ito/tables/gpus/data.json     data.ito.tables.gpus (GPU table, a source per row)
//	ito/tables/fabrics/data.json  data.ito.tables.fabrics (fabric table, a source per row)
//	ito/tables/workloads/data.json data.ito.tables.workloads (workload kinds: pod and claim paths,
//	                              replica fields)
//	ito/tables/storage/data.json  data.ito.tables.storage (checkpoint storage tiers, a source per row)
//	ito/config/<gate>/data.json   data.ito.config.<gate> for the lifecycle, checkpoint,
//	                              datachecks and rlvr gates, and the workload gate's
//	                              resource model (GPU resources, DRA device classes,
//	                              device variables and paths)
//	ito/**/*_test.rego, ito/testdata/   tests and their data (not in Bundle)
//
// The decision Go reads is data.ito.admission.decision:
//
//	{"allow": bool,
//	 "violations": [{"code", "gate", "message", "fix"?}],  // sorted by code, then message
//	 "warnings":   [{"code", "gate", "message", "fix"?}],  // same order
//	 "estimates":  {...}}                                   // budget and layout numbers (train.create)
//
// allow is true iff violations is empty.
package policies

import (
	"embed"
	"errors"
	"io/fs"
	"path"
	"strings"
	"time"
)

//go:embed ito
var files embed.FS

// EntrypointQuery is the query Go evaluates against the input document.
const EntrypointQuery = "data.ito.admission.decision"

// WorkloadQuery is the Kubernetes webhook's decision (docs/kubernetes.md).
const WorkloadQuery = "data.ito.workload.decision"

// Bundle returns the production policy bundle as a read-only file tree in OPA
// bundle layout, rooted so that ito/config/data.json is data.ito.config: the
// Rego modules and data.json files under ito/, without tests (*_test.rego)
// or test data (testdata/ directories). Load it with
// bundle.NewCustomReader(bundle.NewFSLoaderWithRoot(policies.Bundle(), ".")).
func Bundle() fs.FS {
	return bundleFS{files}
}

// inBundle reports whether a slash-separated path belongs in the production
// bundle: ito/ itself or below it, not a test module, not under testdata/.
func inBundle(name string) bool {
	if name == "." {
		return true
	}
	parts := strings.Split(name, "/")
	if parts[0] != "ito" {
		return false
	}
	for _, p := range parts {
		if p == "testdata" {
			return false
		}
	}
	return !strings.HasSuffix(path.Base(name), "_test.rego")
}

// bundleFS filters the embedded tree down to the production bundle.
type bundleFS struct{ fsys embed.FS }

func (b bundleFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) || !inBundle(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	if name == "." {
		return rootDir{}, nil
	}
	f, err := b.fsys.Open(name)
	if err != nil {
		return nil, err
	}
	if d, ok := f.(fs.ReadDirFile); ok {
		return filteredDir{ReadDirFile: d, dir: name}, nil
	}
	return f, nil
}

func (b bundleFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) || !inBundle(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	if name == "." {
		return rootEntries()
	}
	entries, err := b.fsys.ReadDir(name)
	if err != nil {
		return nil, err
	}
	return filterEntries(name, entries), nil
}

func (b bundleFS) ReadFile(name string) ([]byte, error) {
	if !fs.ValidPath(name) || !inBundle(name) {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: fs.ErrNotExist}
	}
	return b.fsys.ReadFile(name)
}

func filterEntries(dir string, entries []fs.DirEntry) []fs.DirEntry {
	out := entries[:0:0]
	for _, e := range entries {
		if inBundle(path.Join(dir, e.Name())) {
			out = append(out, e)
		}
	}
	return out
}

func rootEntries() ([]fs.DirEntry, error) {
	entries, err := files.ReadDir(".")
	if err != nil {
		return nil, err
	}
	return filterEntries(".", entries), nil
}

// filteredDir lists only the bundle's entries of an embedded directory.
type filteredDir struct {
	fs.ReadDirFile
	dir string
}

func (d filteredDir) ReadDir(n int) ([]fs.DirEntry, error) {
	if n > 0 {
		return nil, errors.New("policies: partial ReadDir is not supported")
	}
	entries, err := d.ReadDirFile.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	return filterEntries(d.dir, entries), nil
}

// rootDir is the bundle's root directory, which holds only ito/.
type rootDir struct{}

func (rootDir) Stat() (fs.FileInfo, error) { return rootInfo{}, nil }
func (rootDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: ".", Err: errors.New("is a directory")}
}
func (rootDir) Close() error { return nil }
func (rootDir) ReadDir(n int) ([]fs.DirEntry, error) {
	if n > 0 {
		return nil, errors.New("policies: partial ReadDir is not supported")
	}
	return rootEntries()
}

type rootInfo struct{}

func (rootInfo) Name() string       { return "." }
func (rootInfo) Size() int64        { return 0 }
func (rootInfo) Mode() fs.FileMode  { return fs.ModeDir | 0o555 }
func (rootInfo) ModTime() time.Time { return time.Time{} }
func (rootInfo) IsDir() bool        { return true }
func (rootInfo) Sys() any           { return nil }
