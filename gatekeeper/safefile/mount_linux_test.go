package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// readOnlyView bind-mounts dir read-only at dir+"-ro" inside a private mount
// namespace of one OS thread, as the kubelet mounts a volume into a
// container, and returns the view's path and a function running f on that
// thread (the only one that sees the mount). dir itself stays writable, as
// the kubelet's copy on the node does. It skips the test where mount
// namespaces cannot be made (no CAP_SYS_ADMIN).
func readOnlyView(t *testing.T, dir string) (string, func(f func())) {
	t.Helper()
	view := dir + "-ro"
	mustDo(t, os.Mkdir(view, 0o755))
	calls := make(chan func())
	ready := make(chan error)
	go func() {
		// Never unlocked: the thread ends with the goroutine, and the
		// namespace with its mount ends with the thread.
		runtime.LockOSThread()
		err := unix.Unshare(unix.CLONE_NEWNS)
		if err == nil {
			// Private first, so the bind mount never propagates to the
			// machine's namespace.
			err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		}
		if err == nil {
			err = unix.Mount(dir, view, "", unix.MS_BIND, "")
		}
		if err == nil {
			err = unix.Mount("", view, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, "")
		}
		ready <- err
		if err != nil {
			return
		}
		for f := range calls {
			f()
		}
	}()
	if err := <-ready; err != nil {
		t.Skipf("no private read-only mount here: %v", err)
	}
	t.Cleanup(func() { close(calls) })
	return view, func(f func()) {
		done := make(chan struct{})
		calls <- func() { defer close(done); f() }
		<-done
	}
}

// TestReadMountedReadOnlyConfigMapVolume: the kubelet makes a ConfigMap
// volume's directory 0777 (no sticky bit) on the node's disk and mounts it
// read-only into the container. ReadMounted reads through such a mount
// directory, owned by root, and follows a ..data swap made on the writable
// side; it refuses the same directory on a writable mount or owned by
// another user, ReadFile (the CLI's reader) refuses it, and a FIFO or an
// oversize file in it is refused as anywhere else.
func TestReadMountedReadOnlyConfigMapVolume(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the volume directory is root's, and mounting needs CAP_SYS_ADMIN")
	}
	vol := filepath.Join(tree(t), "config")
	mustDo(t, os.Mkdir(vol, 0o755))
	configMap(t, vol, "2026_01_01_00_00_00.1", map[string]string{"itogate.yaml": "v1"})
	write(t, filepath.Join(vol, "plain"), "p", 0o644)
	mustDo(t, unix.Mkfifo(filepath.Join(vol, "fifo"), 0o600))
	mustDo(t, os.Symlink("fifo", filepath.Join(vol, "tofifo")))
	mustDo(t, os.Chmod(vol, 0o777))
	if _, err := ReadMounted(filepath.Join(vol, "itogate.yaml"), 16); !errors.Is(err, ErrPermissions) {
		t.Fatalf("world-writable on a writable mount: %v; want %v", err, ErrPermissions)
	}

	view, on := readOnlyView(t, vol)
	read := func(name string, limit int64) (got []byte, err error) {
		on(func() { got, err = ReadMounted(filepath.Join(view, name), limit) })
		return got, err
	}
	if got, err := read("itogate.yaml", 16); err != nil || string(got) != "v1" {
		t.Fatalf("ReadMounted through the read-only mount = %q, %v; want v1", got, err)
	}
	configMap(t, vol, "2026_01_01_00_01_00.2", map[string]string{"itogate.yaml": "v2"})
	if got, err := read("itogate.yaml", 16); err != nil || string(got) != "v2" {
		t.Fatalf("after the ..data swap = %q, %v; want v2", got, err)
	}
	if got, err := read("tofifo", 16); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a FIFO in the volume = %q, %v; want %v", got, err, ErrNotRegular)
	}
	if got, err := read("itogate.yaml", 1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("past the limit = %q, %v; want %v", got, err, ErrTooLarge)
	}
	var err error
	on(func() { _, err = ReadFile(filepath.Join(view, "plain"), 16) })
	if !errors.Is(err, ErrPermissions) {
		t.Errorf("ReadFile in the read-only mount: %v; want %v", err, ErrPermissions)
	}
	mustDo(t, os.Chown(vol, 65532, 65532))
	if got, err := read("itogate.yaml", 16); !errors.Is(err, ErrPermissions) {
		t.Errorf("the volume directory owned by uid 65532 = %q, %v; want %v", got, err, ErrPermissions)
	}
}
