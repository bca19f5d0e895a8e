package safefile

import "golang.org/x/sys/unix"

// dirOpenFlags opens directories on the path with O_PATH: the walk only
// needs search permission, as the kernel's own path lookup does, not read
// permission (a home directory is often 0711).
const dirOpenFlags = unix.O_PATH

// readOnlyMount reports whether the file open as fd lies on a mount that is
// read-only (statfs ST_RDONLY: the mount's own flag, as a read-only bind
// mount sets it, or its file system's). An error reports false.
func readOnlyMount(fd int) bool {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return false
	}
	return fs.Flags&unix.ST_RDONLY != 0
}
