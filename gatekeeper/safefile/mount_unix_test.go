//go:build unix

package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// configMap lays out dir as the kubelet lays out a ConfigMap or Secret
// volume: ..<version>/<name> real files, ..data → ..<version>, and <name> →
// ..data/<name> for each file.
func configMap(t *testing.T, dir, version string, files map[string]string) {
	t.Helper()
	vdir := filepath.Join(dir, ".."+version)
	mustDo(t, os.Mkdir(vdir, 0o755))
	for name, data := range files {
		write(t, filepath.Join(vdir, name), data, 0o644)
		if _, err := os.Lstat(filepath.Join(dir, name)); errors.Is(err, os.ErrNotExist) {
			mustDo(t, os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)))
		}
	}
	// The atomic swap: a new link renamed over ..data.
	mustDo(t, os.Symlink(".."+version, filepath.Join(dir, "..data_tmp")))
	mustDo(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
}

func TestReadMountedConfigMap(t *testing.T) {
	dir := tree(t)
	mount := filepath.Join(dir, "mount")
	mustDo(t, os.Mkdir(mount, 0o755))
	configMap(t, mount, "2026_01_01_00_00_00.1", map[string]string{"keys.jwks": "v1", "config.yaml": "c1"})

	got, err := ReadMounted(filepath.Join(mount, "keys.jwks"), 16)
	if err != nil || string(got) != "v1" {
		t.Fatalf("ReadMounted = %q, %v; want v1", got, err)
	}
	// ReadFile, for the CLI, still refuses the link.
	if _, err := ReadFile(filepath.Join(mount, "keys.jwks"), 16); !errors.Is(err, ErrSymlink) {
		t.Fatalf("ReadFile through the link = %v, want %v", err, ErrSymlink)
	}

	var s Snapshot
	if got, err := s.ReadFile(filepath.Join(mount, "keys.jwks"), 16); err != nil || string(got) != "v1" {
		t.Fatalf("Snapshot.ReadFile = %q, %v", got, err)
	}
	if c := s.Changed(); c != "" {
		t.Fatalf("Changed before the swap = %q", c)
	}
	configMap(t, mount, "2026_01_01_00_00_01.2", map[string]string{"keys.jwks": "v2", "config.yaml": "c2"})
	if c := s.Changed(); c != filepath.Join(mount, "keys.jwks") {
		t.Fatalf("Changed after the swap = %q, want the key file", c)
	}

	// Consistent reads both files again when the volume is swapped
	// between them: the set returned is one version's.
	swapped := false
	var keys, cfg string
	err = Consistent(3, func(read func(string, int64) ([]byte, error)) error {
		k, err := read(filepath.Join(mount, "keys.jwks"), 16)
		if err != nil {
			return err
		}
		if !swapped {
			swapped = true
			configMap(t, mount, "2026_01_01_00_00_02.3", map[string]string{"keys.jwks": "v3", "config.yaml": "c3"})
		}
		c, err := read(filepath.Join(mount, "config.yaml"), 16)
		keys, cfg = string(k), string(c)
		return err
	})
	if err != nil || keys != "v3" || cfg != "c3" {
		t.Fatalf("Consistent = %q, %q, %v; want v3, c3", keys, cfg, err)
	}
	// A volume that keeps changing fails after the attempts.
	n := 0
	err = Consistent(2, func(read func(string, int64) ([]byte, error)) error {
		_, err := read(filepath.Join(mount, "keys.jwks"), 16)
		n++
		configMap(t, mount, "2026_01_01_00_00_1"+string(rune('0'+n)), map[string]string{"keys.jwks": "v"})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "replaced while being read, 2 times in a row") || n != 2 {
		t.Fatalf("Consistent on a changing volume = %v after %d attempts", err, n)
	}
}

func TestReadMountedRefuses(t *testing.T) {
	dir := tree(t)
	mount := filepath.Join(dir, "mount")
	mustDo(t, os.Mkdir(mount, 0o755))
	write(t, filepath.Join(dir, "outside"), "secret", 0o600)
	mustDo(t, unix.Mkfifo(filepath.Join(mount, "fifo"), 0o600))
	mustDo(t, os.Mkdir(filepath.Join(mount, "sub"), 0o700))
	write(t, filepath.Join(mount, "big"), strings.Repeat("x", 100), 0o600)
	links := map[string]string{
		"up":       "../outside",
		"abs":      filepath.Join(dir, "outside"),
		"dev":      "/dev/zero",
		"tofifo":   "fifo",
		"loop":     "loop",
		"todir":    ".",
		"deepup":   "sub/../../outside",
		"danglink": "missing",
	}
	for name, target := range links {
		mustDo(t, os.Symlink(target, filepath.Join(mount, name)))
	}
	linkedDir := filepath.Join(dir, "linked")
	mustDo(t, os.Symlink("mount", linkedDir))
	write(t, filepath.Join(mount, "ok"), "fine", 0o600)

	for _, tc := range []struct {
		path string
		want error
	}{
		{filepath.Join(mount, "up"), ErrSymlink},
		{filepath.Join(mount, "abs"), ErrSymlink},
		{filepath.Join(mount, "dev"), ErrSymlink},
		{"/dev/zero", ErrNotRegular},
		{filepath.Join(mount, "fifo"), ErrNotRegular},
		{filepath.Join(mount, "tofifo"), ErrNotRegular},
		{filepath.Join(mount, "loop"), ErrSymlink},
		{filepath.Join(mount, "todir"), ErrNotRegular},
		{filepath.Join(mount, "deepup"), ErrSymlink},
		{filepath.Join(mount, "danglink"), ErrNotFound},
		{filepath.Join(mount, "big"), ErrTooLarge},
		// A link above the mount directory is refused as ReadFile refuses it.
		{filepath.Join(linkedDir, "ok"), ErrSymlink},
	} {
		if got, err := ReadMounted(tc.path, 16); !errors.Is(err, tc.want) {
			t.Errorf("ReadMounted(%s) = %q, %v; want %v", tc.path, got, err, tc.want)
		}
	}
	if got, err := ReadMounted(filepath.Join(mount, "ok"), 16); err != nil || string(got) != "fine" {
		t.Fatalf("ReadMounted(ok) = %q, %v", got, err)
	}
}
