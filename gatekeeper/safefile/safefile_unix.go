//go:build unix

package safefile

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/itocompute/itogate/gatekeeper/api"
	"golang.org/x/sys/unix"
)

// fileOpenFlags open the manifest itself. O_NOFOLLOW: a symlink swapped in
// after the lstat fails with ELOOP. O_NONBLOCK: a FIFO swapped in opens at
// once instead of waiting for a writer, and is then refused by type (reads
// of a regular file ignore it). O_NOCTTY: a tty never becomes our
// controlling terminal.
const fileOpenFlags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC

// ReadManifest reads the file at path and returns its bytes and their digest,
// "sha256:" followed by 64 lowercase hex digits. limit is the largest size
// accepted, in bytes; it must be positive.
//
// It refuses, with an *Error carrying a stable Code:
//   - a path that is empty, holds a NUL, or ends in "/", "/." or "/.."
//     (api.CodeManifestPathInvalid);
//   - a symbolic link in any component, including components a lexical
//     Clean would erase such as "link/.." (api.CodeManifestPathSymlink);
//   - anything but a regular file (api.CodeManifestNotRegular), without blocking on a
//     FIFO and without opening devices when they can be told apart first;
//   - a file owned by someone other than the caller (effective uid) or root
//     (api.CodeManifestOwner);
//   - a group- or world-writable file, or a world-writable directory without
//     the sticky bit anywhere on the path (api.CodeManifestPermissions);
//   - more than limit bytes (api.CodeManifestTooLarge).
//
// Every check is made on the open descriptor, and the bytes hashed are the
// bytes read from that descriptor, so swapping the file between the checks
// and the read changes nothing. Relative paths are resolved against the
// kernel's working directory (getcwd), not $PWD, which may name it through a
// symlink.
func ReadManifest(path string, limit int64) (data []byte, digest string, err error) {
	if limit <= 0 || limit == math.MaxInt64 {
		return nil, "", fmt.Errorf("safefile: limit %d out of range", limit)
	}
	abs, err := absolute(path)
	if err != nil {
		return nil, "", err
	}
	canon := filepath.Clean(abs)

	dir, name, err := openParent(abs, canon, false)
	if err != nil {
		return nil, "", err
	}
	defer unix.Close(dir)

	f, err := openFinal(dir, name, canon)
	if err != nil {
		return nil, "", err
	}
	defer unix.Close(f)

	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil {
		return nil, "", &Error{Code: api.CodeManifestUnreadable, Path: canon, Detail: "fstat", Err: err}
	}
	if err := checkFile(&st, canon, limit); err != nil {
		return nil, "", err
	}
	data, err = readAtMost(f, limit, st.Size)
	if err != nil {
		return nil, "", &Error{Code: api.CodeManifestUnreadable, Path: canon, Detail: "read", Err: err}
	}
	if int64(len(data)) > limit {
		// The file grew after fstat; the bytes past limit were never kept.
		return nil, "", &Error{Code: api.CodeManifestTooLarge, Path: canon, Detail: fmt.Sprintf("more than %d bytes", limit)}
	}
	sum := sha256.Sum256(data)
	return data, "sha256:" + hex.EncodeToString(sum[:]), nil
}

// ReadFile reads at most limit bytes from the file at path with every check
// of ReadManifest (same codes): for every other file the CLI reads — a
// detached signature, a token file, a key, a bundle — so none is followed
// through a symlink, none blocks on a FIFO, and none is read past a bound.
func ReadFile(path string, limit int64) ([]byte, error) {
	data, _, err := ReadManifest(path, limit)
	return data, err
}

// Open opens the file at path for reading with every check of ReadManifest
// but the size, for files read as a stream (a decision log). The caller
// closes it.
func Open(path string) (*os.File, error) {
	abs, err := absolute(path)
	if err != nil {
		return nil, err
	}
	canon := filepath.Clean(abs)
	dir, name, err := openParent(abs, canon, false)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	fd, err := openFinal(dir, name, canon)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &Error{Code: api.CodeManifestUnreadable, Path: canon, Detail: "fstat", Err: err}
	}
	if err := checkFile(&st, canon, math.MaxInt64); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), canon), nil
}

// absolute validates the form of path and makes it absolute without
// cleaning it: the walk must see every component the caller wrote.
func absolute(path string) (string, error) {
	bad := func(detail string) error {
		return &Error{Code: api.CodeManifestPathInvalid, Path: path, Detail: detail}
	}
	switch {
	case path == "":
		return "", bad("empty path")
	case strings.IndexByte(path, 0) >= 0:
		return "", bad("NUL byte in path")
	case strings.HasSuffix(path, "/"):
		// A trailing slash makes the kernel follow a final symlink and names
		// a directory; neither is a manifest.
		return "", bad("trailing slash")
	}
	switch base := path[strings.LastIndexByte(path, '/')+1:]; base {
	case ".", "..":
		return "", bad("path ends in " + base)
	}
	if filepath.IsAbs(path) {
		return path, nil
	}
	wd, err := unix.Getwd()
	if err != nil {
		return "", &Error{Code: api.CodeManifestUnreadable, Path: path, Detail: "working directory", Err: err}
	}
	return wd + "/" + path, nil
}

// openParent walks abs from the root one component at a time, each
// directory opened relative to the previous descriptor with O_NOFOLLOW, so a
// symlink anywhere is refused rather than followed, and no component can be
// swapped for one between check and use. It returns the descriptor of the
// final component's directory and the final component's name. Every
// directory passes checkDir; with mount, the final component's directory
// passes checkMountDir instead.
func openParent(abs, canon string, mount bool) (int, string, error) {
	parts := strings.Split(abs, "/")
	name := parts[len(parts)-1]
	var dirs []string // the directory components, in order
	for _, part := range parts[:len(parts)-1] {
		if part != "" && part != "." {
			dirs = append(dirs, part)
		}
	}
	check := func(i int) func(int, string, string) error {
		if mount && i == len(dirs)-1 {
			return checkMountDir
		}
		return checkDir
	}
	dir, err := unix.Open("/", dirOpenFlags|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", &Error{Code: api.CodeManifestUnreadable, Path: canon, Detail: "open /", Err: err}
	}
	if err := check(-1)(dir, "/", canon); err != nil {
		unix.Close(dir)
		return -1, "", err
	}
	walked := "" // the path opened so far, for messages
	for i, part := range dirs {
		walked += "/" + part
		// ".." is opened too, not erased lexically: since no component is
		// ever a followed symlink, the kernel's parent is the lexical one,
		// and "link/.." is refused for its link.
		next, err := unix.Openat(dir, part, dirOpenFlags|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			err = componentError(dir, part, walked, canon, err)
			unix.Close(dir)
			return -1, "", err
		}
		unix.Close(dir)
		dir = next
		if err := check(i)(dir, walked, canon); err != nil {
			unix.Close(dir)
			return -1, "", err
		}
	}
	return dir, name, nil
}

// checkDir refuses a descriptor that is not a directory (O_PATH with
// O_NOFOLLOW can hand back the link itself) or is world-writable without the
// sticky bit: anyone could then rename the manifest away and put theirs in
// its place.
func checkDir(fd int, where, canon string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &Error{Code: api.CodeManifestUnreadable, Path: canon, Detail: fmt.Sprintf("fstat %q", where), Err: err}
	}
	mode := uint32(st.Mode)
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		return &Error{Code: api.CodeManifestPathSymlink, Path: canon, Detail: fmt.Sprintf("%q is a symbolic link", where)}
	default:
		return &Error{Code: api.CodeManifestNotFound, Path: canon, Detail: fmt.Sprintf("%q is not a directory", where)}
	}
	if mode&0o002 != 0 && mode&unix.S_ISVTX == 0 {
		return &Error{Code: api.CodeManifestPermissions, Path: canon, Detail: fmt.Sprintf("directory %q is world-writable without the sticky bit (fix: chmod o-w or chmod +t that directory, or move the file)", where)}
	}
	return nil
}

// checkMountDir is checkDir for the directory of a Kubernetes volume (the
// directory holding a file ReadMounted reads, and the directories under
// it): a world-writable directory without the sticky bit is accepted too
// when it is owned by root and lies on a read-only mount, where no one can
// create, rename or remove an entry through the path being read. The
// kubelet makes a ConfigMap volume's directory 0777 on the node's disk and
// always mounts it read-only into the container, so its mount directory is
// exactly that. Off Linux no mount counts as read-only here, and checkDir
// decides alone.
func checkMountDir(fd int, where, canon string) error {
	err := checkDir(fd, where, canon)
	var e *Error
	if err == nil || !errors.As(err, &e) || e.Code != api.CodeManifestPermissions {
		return err
	}
	var st unix.Stat_t
	if serr := unix.Fstat(fd, &st); serr != nil || st.Uid != 0 || !readOnlyMount(fd) {
		return err
	}
	return nil
}

// componentError classifies a failed open of part inside dir; where is the
// path up to and including part, for the message. ELOOP is what
// O_NOFOLLOW gives for a symlink, but O_DIRECTORY may win with ENOTDIR, so an
// lstat decides.
func componentError(dir int, part, where, canon string, err error) error {
	var st unix.Stat_t
	if lerr := unix.Fstatat(dir, part, &st, unix.AT_SYMLINK_NOFOLLOW); lerr == nil && uint32(st.Mode)&unix.S_IFMT == unix.S_IFLNK {
		return &Error{Code: api.CodeManifestPathSymlink, Path: canon, Detail: fmt.Sprintf("%q is a symbolic link", where)}
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		return &Error{Code: api.CodeManifestPathSymlink, Path: canon, Detail: fmt.Sprintf("%q is a symbolic link", where), Err: err}
	case errors.Is(err, unix.ENOENT):
		return &Error{Code: api.CodeManifestNotFound, Path: canon, Detail: fmt.Sprintf("%q does not exist", where), Err: err}
	case errors.Is(err, unix.ENOTDIR):
		// Only a directory component can be "not a directory": the final
		// open does not ask for one.
		return &Error{Code: api.CodeManifestNotFound, Path: canon, Detail: fmt.Sprintf("%q is not a directory", where), Err: err}
	}
	return &Error{Code: api.CodeManifestUnreadable, Path: canon, Detail: fmt.Sprintf("open %q", where), Err: err}
}

// openFinal opens the manifest itself. An lstat first refuses links and
// special files without opening them (opening a device or tty can have side
// effects); the fstat after opening is what counts, since the file can be
// swapped between the two.
func openFinal(dir int, name, canon string) (int, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return -1, componentError(dir, name, canon, canon, err)
	}
	if err := checkType(uint32(st.Mode), canon); err != nil {
		return -1, err
	}
	f, err := unix.Openat(dir, name, fileOpenFlags, 0)
	if err != nil {
		return -1, componentError(dir, name, canon, canon, err)
	}
	return f, nil
}

func checkType(mode uint32, canon string) error {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFLNK:
		return &Error{Code: api.CodeManifestPathSymlink, Path: canon, Detail: "the file is a symbolic link"}
	case unix.S_IFDIR:
		return &Error{Code: api.CodeManifestNotRegular, Path: canon, Detail: "is a directory"}
	case unix.S_IFIFO:
		return &Error{Code: api.CodeManifestNotRegular, Path: canon, Detail: "is a FIFO"}
	case unix.S_IFCHR, unix.S_IFBLK:
		return &Error{Code: api.CodeManifestNotRegular, Path: canon, Detail: "is a device"}
	case unix.S_IFSOCK:
		return &Error{Code: api.CodeManifestNotRegular, Path: canon, Detail: "is a socket"}
	}
	return &Error{Code: api.CodeManifestNotRegular, Path: canon, Detail: "is not a regular file"}
}

func checkFile(st *unix.Stat_t, canon string, limit int64) error {
	mode := uint32(st.Mode)
	if err := checkType(mode, canon); err != nil {
		return err
	}
	// The effective uid is the identity the kernel checks our access with.
	if uid := uint32(os.Geteuid()); st.Uid != uid && st.Uid != 0 {
		return &Error{Code: api.CodeManifestOwner, Path: canon, Detail: fmt.Sprintf("owned by uid %d, not by uid %d or root (copy it to a file of your own: cp %s ./)", st.Uid, uid, canon)}
	}
	if mode&0o022 != 0 {
		return &Error{Code: api.CodeManifestPermissions, Path: canon, Detail: fmt.Sprintf("mode %04o is group- or world-writable, so another user could change it after it was checked (fix: chmod go-w %s)", mode&0o7777, canon)}
	}
	if st.Size > limit {
		// Refused before reading: no need to pull limit+1 bytes of a huge
		// (or sparse) file to learn what fstat already says.
		return &Error{Code: api.CodeManifestTooLarge, Path: canon, Detail: fmt.Sprintf("%d bytes, limit %d", st.Size, limit)}
	}
	return nil
}

// readAtMost reads from fd until EOF or until it holds limit+1 bytes, so a
// file that grew past limit is detected without reading the rest. sizeHint
// (the fstat size) sizes the buffer.
func readAtMost(fd int, limit, sizeHint int64) ([]byte, error) {
	want := limit + 1
	buf := make([]byte, 0, min(max(sizeHint+1, 512), want))
	for int64(len(buf)) < want {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		end := min(int64(cap(buf)), want)
		n, err := unix.Read(fd, buf[len(buf):end])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	return buf, nil
}
