//go:build unix

package safefile

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/internal/patience"
)

const content = `{"schema":"ito.training/v1","model":{"name":"llama3-8b"}}` + "\n"

// tree builds a fresh directory (resolved, so the temp dir itself is no
// symlink) holding m.json (0600), real/ with real/m.json, and returns it.
func tree(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "m.json"), content, 0o600)
	if err := os.Mkdir(filepath.Join(dir, "real"), 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "real", "m.json"), content, 0o600)
	return dir
}

func write(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	// Chmod too: WriteFile's mode passes through the umask.
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func sha(data string) string {
	sum := sha256.Sum256([]byte(data))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestReadManifest(t *testing.T) {
	const limit = 1 << 20
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) string // returns the path to read
		code  api.Code                              // "" for success with content
	}{
		{"good file", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "m.json")
		}, ""},
		{"good file in subdirectory", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "real", "m.json")
		}, ""},
		{"dot-dot through real directory", func(t *testing.T, dir string) string {
			return dir + "/real/../m.json"
		}, ""},
		{"duplicate slashes and dots", func(t *testing.T, dir string) string {
			return dir + "//./real/./m.json"
		}, ""},
		{"root-owned in sticky world-writable directory", func(t *testing.T, dir string) string {
			sticky := filepath.Join(dir, "tmp")
			mustDo(t, os.Mkdir(sticky, 0o700))
			mustDo(t, os.Chmod(sticky, os.ModeSticky|0o777))
			write(t, filepath.Join(sticky, "m.json"), content, 0o644)
			return filepath.Join(sticky, "m.json")
		}, ""},
		{"symlink as file", func(t *testing.T, dir string) string {
			mustDo(t, os.Symlink(filepath.Join(dir, "m.json"), filepath.Join(dir, "link.json")))
			return filepath.Join(dir, "link.json")
		}, api.CodeManifestPathSymlink},
		{"relative in-tree symlink", func(t *testing.T, dir string) string {
			mustDo(t, os.Symlink("./m.json", filepath.Join(dir, "link.json")))
			return filepath.Join(dir, "link.json")
		}, api.CodeManifestPathSymlink},
		{"symlink in parent directory", func(t *testing.T, dir string) string {
			mustDo(t, os.Symlink("real", filepath.Join(dir, "alias")))
			return filepath.Join(dir, "alias", "m.json")
		}, api.CodeManifestPathSymlink},
		{"symlink erased by a lexical clean", func(t *testing.T, dir string) string {
			mustDo(t, os.Symlink("/etc", filepath.Join(dir, "alias")))
			return dir + "/alias/../m.json"
		}, api.CodeManifestPathSymlink},
		{"dangling symlink", func(t *testing.T, dir string) string {
			mustDo(t, os.Symlink("nowhere.json", filepath.Join(dir, "link.json")))
			return filepath.Join(dir, "link.json")
		}, api.CodeManifestPathSymlink},
		{"trailing slash", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "m.json") + "/"
		}, api.CodeManifestPathInvalid},
		{"trailing slash on a symlink to a directory", func(t *testing.T, dir string) string {
			mustDo(t, os.Symlink("real", filepath.Join(dir, "alias")))
			return filepath.Join(dir, "alias") + "/"
		}, api.CodeManifestPathInvalid},
		{"final dot", func(t *testing.T, dir string) string { return dir + "/real/." }, api.CodeManifestPathInvalid},
		{"final dot-dot", func(t *testing.T, dir string) string { return dir + "/real/.." }, api.CodeManifestPathInvalid},
		{"empty path", func(t *testing.T, dir string) string { return "" }, api.CodeManifestPathInvalid},
		{"NUL in path", func(t *testing.T, dir string) string { return dir + "/m.json\x00x" }, api.CodeManifestPathInvalid},
		{"FIFO", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "fifo.json")
			mustDo(t, unix.Mkfifo(p, 0o600))
			return p
		}, api.CodeManifestNotRegular},
		{"directory", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "real")
		}, api.CodeManifestNotRegular},
		{"device /dev/null", func(t *testing.T, dir string) string { return "/dev/null" }, api.CodeManifestNotRegular},
		{"socket", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "s.sock")
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			mustDo(t, err)
			t.Cleanup(func() { unix.Close(fd) })
			mustDo(t, unix.Bind(fd, &unix.SockaddrUnix{Name: p}))
			return p
		}, api.CodeManifestNotRegular},
		{"group-writable", func(t *testing.T, dir string) string {
			mustDo(t, os.Chmod(filepath.Join(dir, "m.json"), 0o620))
			return filepath.Join(dir, "m.json")
		}, api.CodeManifestPermissions},
		{"world-writable", func(t *testing.T, dir string) string {
			mustDo(t, os.Chmod(filepath.Join(dir, "m.json"), 0o602))
			return filepath.Join(dir, "m.json")
		}, api.CodeManifestPermissions},
		{"world-writable directory without sticky bit", func(t *testing.T, dir string) string {
			mustDo(t, os.Chmod(filepath.Join(dir, "real"), 0o777))
			return filepath.Join(dir, "real", "m.json")
		}, api.CodeManifestPermissions},
		{"world-writable ancestor without sticky bit", func(t *testing.T, dir string) string {
			mustDo(t, os.MkdirAll(filepath.Join(dir, "open", "inner"), 0o700))
			mustDo(t, os.Chmod(filepath.Join(dir, "open"), 0o777))
			write(t, filepath.Join(dir, "open", "inner", "m.json"), content, 0o600)
			return filepath.Join(dir, "open", "inner", "m.json")
		}, api.CodeManifestPermissions},
		{"missing file", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "absent.json")
		}, api.CodeManifestNotFound},
		{"missing directory", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "absent", "m.json")
		}, api.CodeManifestNotFound},
		{"file used as directory", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "m.json", "x.json")
		}, api.CodeManifestNotFound},
		{"sparse file far over the limit", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "big.json")
			write(t, p, "", 0o600)
			mustDo(t, os.Truncate(p, 1<<30))
			return p
		}, api.CodeManifestTooLarge},
		{"one byte over the limit", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "over.json")
			write(t, p, strings.Repeat("x", limit+1), 0o600)
			return p
		}, api.CodeManifestTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := tc.setup(t, tree(t))

			type result struct {
				data   []byte
				digest string
				err    error
			}
			done := make(chan result, 1)
			go func() {
				data, digest, err := ReadManifest(path, limit)
				done <- result{data, digest, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(patience.Wait):
				t.Fatal("ReadManifest hung")
			}

			if tc.code == "" {
				if r.err != nil {
					t.Fatalf("ReadManifest(%q) = %v", path, r.err)
				}
				if string(r.data) != content || r.digest != sha(content) {
					t.Fatalf("ReadManifest = %q, %s; want %q, %s", r.data, r.digest, content, sha(content))
				}
				return
			}
			var e *Error
			if !errors.As(r.err, &e) || e.Code != tc.code {
				t.Fatalf("ReadManifest(%q) = %v; want code %s", path, r.err, tc.code)
			}
			if !errors.Is(r.err, &Error{Code: tc.code}) || !strings.Contains(r.err.Error(), string(tc.code)) {
				t.Fatalf("error %q does not match or name its code %s", r.err, tc.code)
			}
			if r.data != nil || r.digest != "" {
				t.Fatalf("refusal returned data %q, digest %q", r.data, r.digest)
			}
		})
	}
}

func TestReadManifestSizes(t *testing.T) {
	dir := tree(t)
	for _, n := range []int{0, 1, 511, 512, 513, 4096, 100_000} {
		p := filepath.Join(dir, "sized.json")
		data := strings.Repeat("a", n)
		write(t, p, data, 0o600)
		got, digest, err := ReadManifest(p, 100_000)
		if err != nil || string(got) != data || digest != sha(data) {
			t.Fatalf("%d bytes: got %d bytes, %s, %v", n, len(got), digest, err)
		}
	}
	if _, _, err := ReadManifest(filepath.Join(dir, "m.json"), 0); err == nil {
		t.Fatal("limit 0 accepted")
	}
}

// TestReadManifestOwner needs root, which can give a file away.
func TestReadManifestOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another uid needs root")
	}
	dir := tree(t)
	p := filepath.Join(dir, "m.json")
	mustDo(t, os.Chown(p, 12345, 12345))
	_, _, err := ReadManifest(p, 1<<20)
	if !errors.Is(err, ErrOwner) {
		t.Fatalf("ReadManifest(uid 12345) = %v, want %s", err, api.CodeManifestOwner)
	}
	// Group ownership alone does not matter.
	mustDo(t, os.Chown(p, 0, 12345))
	if _, _, err := ReadManifest(p, 1<<20); err != nil {
		t.Fatalf("ReadManifest(root:12345) = %v", err)
	}
}

// TestReadManifestRelative resolves against the working directory; it
// changes it, so it cannot run in parallel.
func TestReadManifestRelative(t *testing.T) {
	dir := tree(t)
	mustDo(t, os.Symlink("real", filepath.Join(dir, "alias")))
	t.Chdir(filepath.Join(dir, "real"))

	for path, code := range map[string]api.Code{
		"m.json":          "",
		"./m.json":        "",
		"../m.json":       "",
		"../alias/m.json": api.CodeManifestPathSymlink,
		"../real/m.json/": api.CodeManifestPathInvalid,
	} {
		data, _, err := ReadManifest(path, 1<<20)
		switch {
		case code == "" && (err != nil || string(data) != content):
			t.Errorf("ReadManifest(%q) = %q, %v", path, data, err)
		case code != "" && !errors.Is(err, &Error{Code: code}):
			t.Errorf("ReadManifest(%q) = %v, want %s", path, err, code)
		}
	}

	// Entered through a symlink, the working directory is still the real
	// one: getcwd, not $PWD, anchors relative paths.
	t.Chdir(filepath.Join(dir, "alias"))
	t.Setenv("PWD", filepath.Join(dir, "alias"))
	if _, _, err := ReadManifest("m.json", 1<<20); err != nil {
		t.Fatalf("ReadManifest from a directory entered via symlink = %v", err)
	}
}

// TestReadAtMost drives the read loop past the fstat shortcut: a file that
// grew after fstat is cut at limit+1 bytes.
func TestReadAtMost(t *testing.T) {
	dir := tree(t)
	p := filepath.Join(dir, "big.json")
	write(t, p, "", 0o600)
	mustDo(t, os.Truncate(p, 1<<30))
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	mustDo(t, err)
	defer unix.Close(fd)
	start := time.Now()
	data, err := readAtMost(fd, 1000, 10) // stale size hint
	if err != nil || len(data) != 1001 {
		t.Fatalf("readAtMost = %d bytes, %v; want 1001", len(data), err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("readAtMost took %v", d)
	}
}

// TestFIFOOpenDoesNotBlock covers a FIFO swapped in after the lstat check:
// the open itself must return at once, and the descriptor is then refused.
func TestFIFOOpenDoesNotBlock(t *testing.T) {
	dir := tree(t)
	mustDo(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	d, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	mustDo(t, err)
	defer unix.Close(d)
	done := make(chan error, 1)
	go func() {
		f, err := unix.Openat(d, "fifo", fileOpenFlags, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(f)
		var st unix.Stat_t
		mustDo(t, unix.Fstat(f, &st))
		done <- checkFile(&st, "fifo", 1<<20)
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) {
			t.Fatalf("FIFO = %v, want %s", err, api.CodeManifestNotRegular)
		}
	case <-time.After(patience.Wait):
		t.Fatal("opening a FIFO blocked")
	}
}

// FuzzReadManifest: whatever the path, ReadManifest either refuses with a
// code or returns exactly a regular file's bytes and digest, and never reads
// through the symlink "alias".
func FuzzReadManifest(f *testing.F) {
	for _, seed := range []string{
		"m.json", "real/m.json", "alias/m.json", "alias/../m.json", "real/../m.json",
		"m.json/", "./real/./m.json", "real", "", "../../../../etc/passwd", "real//m.json",
	} {
		f.Add(seed)
	}
	dir, err := filepath.EvalSymlinks(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "m.json"), []byte(content), 0o600); err != nil {
		f.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "real"), 0o700); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "real", "m.json"), []byte(content), 0o600); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(dir, "alias")); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		path := dir + "/" + rel
		data, digest, err := ReadManifest(path, 1<<20)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code == "" {
				t.Fatalf("ReadManifest(%q) = %v, not a coded *Error", path, err)
			}
			return
		}
		if digest != sha(string(data)) {
			t.Fatalf("digest %s does not match the bytes", digest)
		}
		for part := range strings.SplitSeq(path, "/") {
			if part == "alias" {
				t.Fatalf("ReadManifest(%q) read through the symlink", path)
			}
		}
	})
}
