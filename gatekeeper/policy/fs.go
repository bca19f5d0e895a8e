package policy

import (
	"io/fs"
	"path"
	"strings"
)

// withoutTests hides *_test.rego files, testdata/ directories and Go
// sources so that an enforced bundle never carries test-only rules.
type withoutTests struct{ fs.FS }

func (w withoutTests) Open(name string) (fs.File, error) {
	if excluded(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return w.FS.Open(name)
}

func (w withoutTests) ReadDir(name string) ([]fs.DirEntry, error) {
	entries, err := fs.ReadDir(w.FS, name)
	if err != nil {
		return nil, err
	}
	out := entries[:0]
	for _, e := range entries {
		if !excluded(path.Join(name, e.Name())) {
			out = append(out, e)
		}
	}
	return out, nil
}

func excluded(name string) bool {
	base := path.Base(name)
	if strings.HasSuffix(base, "_test.rego") {
		return true
	}
	if strings.HasSuffix(base, ".go") {
		return true
	}
	for _, part := range strings.Split(name, "/") {
		if part == "testdata" {
			return true
		}
	}
	return false
}
