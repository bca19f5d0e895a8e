//go:build unix

package safefile

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// maxMountLinks bounds the symbolic links one ReadMounted follows (the
// kernel's own bound, MAXSYMLINKS, is 40).
const maxMountLinks = 40

func readMounted(path string, limit int64) ([]byte, fileID, error) {
	if limit <= 0 || limit >= 1<<62 {
		return nil, fileID{}, fmt.Errorf("safefile: limit %d out of range", limit)
	}
	abs, err := absolute(path)
	if err != nil {
		return nil, fileID{}, err
	}
	canon := filepath.Clean(abs)
	parent, name, err := openParent(abs, canon, true)
	if err != nil {
		return nil, fileID{}, err
	}
	dir, final, err := resolveBeneath(parent, name, canon)
	unix.Close(parent)
	if err != nil {
		return nil, fileID{}, err
	}
	defer unix.Close(dir)
	f, err := openFinal(dir, final, canon)
	if err != nil {
		return nil, fileID{}, err
	}
	defer unix.Close(f)
	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil {
		return nil, fileID{}, &Error{Code: api.CodeManifestUnreadable, Path: canon, Detail: "fstat", Err: err}
	}
	if err := checkFile(&st, canon, limit); err != nil {
		return nil, fileID{}, err
	}
	data, err := readAtMost(f, limit, st.Size)
	if err != nil {
		return nil, fileID{}, &Error{Code: api.CodeManifestUnreadable, Path: canon, Detail: "read", Err: err}
	}
	if int64(len(data)) > limit {
		return nil, fileID{}, &Error{Code: api.CodeManifestTooLarge, Path: canon, Detail: fmt.Sprintf("more than %d bytes", limit)}
	}
	return data, fileID{path: path, dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
}

// resolveBeneath follows name inside the directory open as root: plain
// components are opened one at a time with O_NOFOLLOW (each directory
// checked as the walk checks them), a symbolic link's relative target is
// spliced in its place, and ".." never climbs above root. It returns a new
// descriptor of the directory holding the final component and that
// component's name, which was not a symbolic link when looked at (openFinal
// refuses one swapped in since).
func resolveBeneath(root int, name, canon string) (int, string, error) {
	first, err := unix.Dup(root)
	if err != nil {
		return -1, "", &Error{Code: api.CodeManifestUnreadable, Path: canon, Detail: "dup", Err: err}
	}
	stack := []int{first} // stack[0] is root; the top is the current directory
	closeAll := func() {
		for _, fd := range stack {
			unix.Close(fd)
		}
	}
	pending := []string{name}
	links := 0
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		cur := stack[len(stack)-1]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 1 {
				closeAll()
				return -1, "", &Error{Code: api.CodeManifestPathSymlink, Path: canon, Detail: "a symbolic link leads out of the file's directory"}
			}
			unix.Close(cur)
			stack = stack[:len(stack)-1]
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(cur, c, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			closeAll()
			return -1, "", componentError(cur, c, canon, canon, err)
		}
		switch uint32(st.Mode) & unix.S_IFMT {
		case unix.S_IFLNK:
			if links++; links > maxMountLinks {
				closeAll()
				return -1, "", &Error{Code: api.CodeManifestPathSymlink, Path: canon, Detail: fmt.Sprintf("more than %d symbolic links", maxMountLinks)}
			}
			target, err := readlinkat(cur, c)
			if err != nil {
				closeAll()
				return -1, "", &Error{Code: api.CodeManifestUnreadable, Path: canon, Detail: "readlink", Err: err}
			}
			if target == "" || strings.HasPrefix(target, "/") || strings.IndexByte(target, 0) >= 0 {
				closeAll()
				return -1, "", &Error{Code: api.CodeManifestPathSymlink, Path: canon, Detail: "a symbolic link with an absolute or empty target"}
			}
			pending = append(strings.Split(target, "/"), pending...)
		case unix.S_IFDIR:
			if len(pending) == 0 {
				closeAll()
				return -1, "", &Error{Code: api.CodeManifestNotRegular, Path: canon, Detail: "is a directory"}
			}
			next, err := unix.Openat(cur, c, dirOpenFlags|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				closeAll()
				return -1, "", componentError(cur, c, canon, canon, err)
			}
			stack = append(stack, next)
			if err := checkMountDir(next, c, canon); err != nil {
				closeAll()
				return -1, "", err
			}
		default:
			if len(pending) > 0 {
				closeAll()
				return -1, "", &Error{Code: api.CodeManifestNotFound, Path: canon, Detail: fmt.Sprintf("%q is not a directory", c)}
			}
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			closeAll()
			return top, c, nil
		}
	}
	closeAll()
	return -1, "", &Error{Code: api.CodeManifestNotRegular, Path: canon, Detail: "is a directory"}
}

// readlinkat is the target of the symbolic link name in dir.
func readlinkat(dir int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= 1<<16 {
			return "", unix.ENAMETOOLONG
		}
		buf = make([]byte, 2*len(buf))
	}
}

// identify resolves path as ReadMounted does, without reading the file.
func identify(path string) (fileID, error) {
	abs, err := absolute(path)
	if err != nil {
		return fileID{}, err
	}
	canon := filepath.Clean(abs)
	parent, name, err := openParent(abs, canon, true)
	if err != nil {
		return fileID{}, err
	}
	dir, final, err := resolveBeneath(parent, name, canon)
	unix.Close(parent)
	if err != nil {
		return fileID{}, err
	}
	defer unix.Close(dir)
	var st unix.Stat_t
	if err := unix.Fstatat(dir, final, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fileID{}, err
	}
	return fileID{path: path, dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
}
