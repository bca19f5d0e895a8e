//go:build unix

package safefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/internal/patience"
)

var testLimits = DirLimits{MaxBytes: 1 << 20, MaxEntries: 100, MaxDepth: 8}

// dirTree builds root/{a.rego, sub/b.json, sub/deeper/c.txt}, each 0600,
// directories 0700, and returns root.
func dirTree(t *testing.T) string {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "bundle")
	mustDo(t, os.MkdirAll(filepath.Join(root, "sub", "deeper"), 0o700))
	for _, d := range []string{root, filepath.Join(root, "sub"), filepath.Join(root, "sub", "deeper")} {
		mustDo(t, os.Chmod(d, 0o700))
	}
	write(t, filepath.Join(root, "a.rego"), "package a\n", 0o600)
	write(t, filepath.Join(root, "sub", "b.json"), `{"b":1}`, 0o600)
	write(t, filepath.Join(root, "sub", "deeper", "c.txt"), "", 0o600)
	return root
}

func TestReadDirReadsTheTree(t *testing.T) {
	root := dirTree(t)
	for _, p := range []string{root, root + "/", root + "//"} {
		fsys, err := ReadDir(p, testLimits)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		var got []string
		err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			got = append(got, p)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want := ". a.rego sub sub/b.json sub/deeper sub/deeper/c.txt"
		if strings.Join(got, " ") != want {
			t.Fatalf("walk %q, want %q", got, want)
		}
		if b, err := fs.ReadFile(fsys, "sub/b.json"); err != nil || string(b) != `{"b":1}` {
			t.Fatalf("sub/b.json: %q, %v", b, err)
		}
	}
	// What was read is what the FS holds: a change after the read is not seen.
	fsys, err := ReadDir(root, testLimits)
	mustDo(t, err)
	write(t, filepath.Join(root, "a.rego"), "package changed\n", 0o600)
	if b, _ := fs.ReadFile(fsys, "a.rego"); string(b) != "package a\n" {
		t.Fatalf("a.rego = %q after the read", b)
	}
}

// TestReadDirRefuses: every hostile tree is refused with its code, and
// nothing blocks (a FIFO anywhere, /dev/zero as the directory).
func TestReadDirRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root string) string
		lim   DirLimits
		code  api.Code
	}{
		{"the directory is a symlink", func(t *testing.T, root string) string {
			link := filepath.Join(filepath.Dir(root), "link")
			mustDo(t, os.Symlink(root, link))
			return link
		}, testLimits, api.CodeManifestPathSymlink},
		{"a symlink in the path", func(t *testing.T, root string) string {
			link := filepath.Join(filepath.Dir(root), "link")
			mustDo(t, os.Symlink(filepath.Dir(root), link))
			return filepath.Join(link, "bundle")
		}, testLimits, api.CodeManifestPathSymlink},
		{"a symlink to a file inside", func(t *testing.T, root string) string {
			mustDo(t, os.Symlink("/etc/passwd", filepath.Join(root, "sub", "passwd")))
			return root
		}, testLimits, api.CodeManifestPathSymlink},
		{"a symlink to a directory inside", func(t *testing.T, root string) string {
			mustDo(t, os.Symlink("/etc", filepath.Join(root, "etc")))
			return root
		}, testLimits, api.CodeManifestPathSymlink},
		{"a FIFO inside", func(t *testing.T, root string) string {
			mustDo(t, syscall.Mkfifo(filepath.Join(root, "sub", "fifo"), 0o600))
			return root
		}, testLimits, api.CodeManifestNotRegular},
		{"the directory is a FIFO", func(t *testing.T, root string) string {
			fifo := filepath.Join(filepath.Dir(root), "fifo")
			mustDo(t, syscall.Mkfifo(fifo, 0o600))
			return fifo
		}, testLimits, api.CodeManifestNotRegular},
		{"the directory is /dev/zero", func(t *testing.T, root string) string { return "/dev/zero" }, testLimits, api.CodeManifestNotRegular},
		{"the directory is a file", func(t *testing.T, root string) string { return filepath.Join(root, "a.rego") }, testLimits, api.CodeManifestNotRegular},
		{"missing", func(t *testing.T, root string) string { return filepath.Join(root, "nope") }, testLimits, api.CodeManifestNotFound},
		{"a group-writable file inside", func(t *testing.T, root string) string {
			mustDo(t, os.Chmod(filepath.Join(root, "sub", "b.json"), 0o620))
			return root
		}, testLimits, api.CodeManifestPermissions},
		{"a world-writable directory inside", func(t *testing.T, root string) string {
			mustDo(t, os.Chmod(filepath.Join(root, "sub"), 0o777))
			return root
		}, testLimits, api.CodeManifestPermissions},
		{"more bytes than the limit", func(t *testing.T, root string) string { return root },
			DirLimits{MaxBytes: 12, MaxEntries: 100, MaxDepth: 8}, api.CodeManifestTooLarge},
		{"a sparse file of 1 TiB", func(t *testing.T, root string) string {
			f, err := os.OpenFile(filepath.Join(root, "sparse"), os.O_CREATE|os.O_WRONLY, 0o600)
			mustDo(t, err)
			mustDo(t, f.Truncate(1<<40))
			mustDo(t, f.Close())
			return root
		}, testLimits, api.CodeManifestTooLarge},
		{"more entries than the limit", func(t *testing.T, root string) string { return root },
			DirLimits{MaxBytes: 1 << 20, MaxEntries: 4, MaxDepth: 8}, api.CodeManifestTooLarge},
		{"deeper than the limit", func(t *testing.T, root string) string { return root },
			DirLimits{MaxBytes: 1 << 20, MaxEntries: 100, MaxDepth: 1}, api.CodeManifestTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.setup(t, dirTree(t))
			done := make(chan error, 1)
			go func() {
				_, err := ReadDir(path, tc.lim)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(patience.Wait):
				t.Fatal("ReadDir blocked")
			}
			var e *Error
			if !errors.As(err, &e) || e.Code != tc.code {
				t.Fatalf("ReadDir(%s) = %v, want %s", path, err, tc.code)
			}
		})
	}
}

func TestReadDirOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	root := dirTree(t)
	mustDo(t, os.Chown(filepath.Join(root, "sub"), 4242, 4242))
	if _, err := ReadDir(root, testLimits); !errors.Is(err, ErrOwner) {
		t.Fatalf("a directory of another user: %v", err)
	}
}
