// Package docs holds no code: its test keeps the repository's documents
// self-contained (no reference to a document that does not ship) and their
// relative links working.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// outside matches references to documents outside the repository: the
// design notes the project started from, and absolute workstation paths.
// The character classes keep this file itself from matching the pattern.
var outside = regexp.MustCompile(`design[ ]§|DESIGN\.md|shared/reference|/w[o]rk/`)

// mdLink matches a relative Markdown link target: ](path) or ](path#anchor).
var mdLink = regexp.MustCompile(`\]\(([^)#:\s]+)(#[^)\s]*)?\)`)

func TestDocumentsAreSelfContained(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case ".git", "bin", "data", "bench/out", "examples/production/keys", "examples/production/data":
				return filepath.SkipDir
			}
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".rego", ".sql", ".yaml", ".sh":
		default:
			if d.Name() != "Makefile" {
				return nil
			}
		}
		if rel == filepath.Join("docs", "docs_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d refers outside the repository (%q): point to docs/architecture.md or another document that ships", rel, i+1, m)
			}
			if filepath.Ext(path) != ".md" {
				continue
			}
			for _, l := range mdLink.FindAllStringSubmatch(line, -1) {
				target := filepath.Join(filepath.Dir(path), l[1])
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s:%d links to %s, which does not exist", rel, i+1, l[1])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files", checked)
	}
}
