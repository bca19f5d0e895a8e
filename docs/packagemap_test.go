package docs

import (
	"errors"
	"go/build"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// mapRow matches a row of the package map in architecture.md §5; the first
// cell names the row's packages in backquotes.
var mapRow = regexp.MustCompile("^\\| (`[^|]*) \\|[^|]*\\|([^|]*)\\|")

// mapName matches one backquoted name in that cell.
var mapName = regexp.MustCompile("`([a-z0-9_./*-]+)`")

// TestPackageMapPointsDown: in the package map, every package imports only
// packages of its own row or of rows below it, every package under
// gatekeeper/ has a row, and every import of another row's package under
// gatekeeper/ is named in the importer's "uses" column (but gatekeeper/api,
// which the text says nearly every package uses). The imports are the real
// ones (build constraints applied, tests left out), so the map cannot drift
// from the code.
func TestPackageMapPointsDown(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	rows, uses := packageMapRows(t, root)
	module := modulePath(t, root)
	pkgs := modulePackages(t, root)
	if len(pkgs) < 20 {
		t.Fatalf("found only %d packages", len(pkgs))
	}
	for _, rel := range slices.Sorted(maps.Keys(pkgs)) {
		imports := pkgs[rel]
		row, ok := rowOf(rows, rel)
		if !ok {
			if strings.HasPrefix(rel, "gatekeeper/") {
				t.Errorf("%s has no row in docs/architecture.md §5 (package map): add one", rel)
			}
			continue
		}
		for _, imp := range imports {
			dep, inModule := strings.CutPrefix(imp, module+"/")
			if !inModule {
				continue
			}
			depRow, ok := rowOf(rows, dep)
			switch {
			case ok && depRow < row:
				t.Errorf("%s (row %d of the package map) imports %s (row %d, above it): "+
					"move a row, or the code, so that imports point down", rel, row+1, dep, depRow+1)
			case ok && depRow != row && strings.HasPrefix(dep, "gatekeeper/") && dep != "gatekeeper/api" &&
				!uses[row]["everything below"] && !uses[row][strings.TrimPrefix(dep, "gatekeeper/")] &&
				!uses[row][path.Base(dep)]:
				t.Errorf("%s imports %s: name `%s` in its row's uses column", rel, dep, path.Base(dep))
			}
		}
	}
}

// packageMapRows returns, for each row of the package map in order, the
// package paths its first cell names ("internal/*" as "internal") and the
// names its uses column holds in backquotes.
func packageMapRows(t *testing.T, root string) ([][]string, []map[string]bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## 5. Package map")
	section, _, _ = strings.Cut(section, "\n## ")
	if !ok {
		t.Fatal("architecture.md has no section 5. Package map")
	}
	var rows [][]string
	var uses []map[string]bool
	for line := range strings.SplitSeq(section, "\n") {
		m := mapRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var names []string
		for _, n := range mapName.FindAllStringSubmatch(m[1], -1) {
			names = append(names, strings.TrimSuffix(n[1], "/*"))
		}
		rows = append(rows, names)
		u := map[string]bool{}
		for _, n := range mapName.FindAllStringSubmatch(m[2], -1) {
			u[n[1]] = true
		}
		if strings.Contains(m[2], "everything below") {
			u["everything below"] = true
		}
		uses = append(uses, u)
	}
	if len(rows) < 10 {
		t.Fatalf("the package map has only %d rows", len(rows))
	}
	return rows, uses
}

// rowOf is the index of the row naming pkg or the nearest directory above
// it (gatekeeper/ledger/bolt is in gatekeeper/ledger's row).
func rowOf(rows [][]string, pkg string) (int, bool) {
	best, bestLen := -1, 0
	for i, names := range rows {
		for _, n := range names {
			if (pkg == n || strings.HasPrefix(pkg, n+"/")) && len(n) > bestLen {
				best, bestLen = i, len(n)
			}
		}
	}
	return best, best >= 0
}

func modulePath(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if m, ok := strings.CutPrefix(line, "module "); ok {
			return strings.TrimSpace(m)
		}
	}
	t.Fatal("go.mod names no module")
	return ""
}

// modulePackages maps each package directory of the module (relative,
// slash-separated) to its non-test imports under the default build
// constraints.
func modulePackages(t *testing.T, root string) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
			return filepath.SkipDir
		}
		p, err := build.Default.ImportDir(path, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		pkgs[filepath.ToSlash(rel)] = p.Imports
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}
