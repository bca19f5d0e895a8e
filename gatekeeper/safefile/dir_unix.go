//go:build unix

package safefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing/fstest"

	"golang.org/x/sys/unix"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// ReadDir reads the directory at path and every file under it with the
// checks of ReadManifest, and returns them as a read-only fs.FS held in
// memory: what the caller reads afterwards is exactly what was checked,
// whatever happens to the directory since.
//
// The path is walked as ReadManifest walks it (no symlink in any
// component; a trailing slash is allowed here). The directory itself and
// every directory under it must be a real directory (a symlink is
// api.CodeManifestPathSymlink, anything else api.CodeManifestNotRegular)
// owned by the caller or root and writable by no one else
// (api.CodeManifestOwner, api.CodeManifestPermissions). Under it, every
// entry must be a directory or a regular file passing ReadManifest's
// checks: a symlink, FIFO, socket or device anywhere is refused by its
// code, without being opened (a FIFO never blocks). The walk stops with
// api.CodeManifestTooLarge past lim's total bytes, file count or depth.
func ReadDir(path string, lim DirLimits) (fs.FS, error) {
	if err := lim.valid(); err != nil {
		return nil, err
	}
	if len(path) > 1 {
		path = strings.TrimRight(path, "/")
		if path == "" {
			path = "/"
		}
	}
	if path == "/" {
		return nil, &Error{Code: api.CodeManifestPathInvalid, Path: path, Detail: "the root directory"}
	}
	abs, err := absolute(path)
	if err != nil {
		return nil, err
	}
	canon := filepath.Clean(abs)
	parent, name, err := openParent(abs, canon, false)
	if err != nil {
		return nil, err
	}
	root, err := openDir(parent, name, canon)
	unix.Close(parent)
	if err != nil {
		return nil, err
	}
	w := dirWalk{lim: lim, files: fstest.MapFS{}}
	err = w.walk(root, canon, ".", 0)
	unix.Close(root)
	if err != nil {
		return nil, err
	}
	return w.files, nil
}

// DirLimits bound ReadDir: the bytes of all files together, the number of
// files and directories, and how deep directories nest.
type DirLimits struct {
	MaxBytes   int64
	MaxEntries int
	MaxDepth   int
}

func (l DirLimits) valid() error {
	if l.MaxBytes <= 0 || l.MaxEntries <= 0 || l.MaxDepth <= 0 {
		return fmt.Errorf("safefile: directory limits %+v out of range", l)
	}
	return nil
}

type dirWalk struct {
	lim     DirLimits
	files   fstest.MapFS
	bytes   int64
	entries int
}

// openDir opens name in dir as a directory the walk may read: never
// through a symlink, never opening anything else.
func openDir(dir int, name, canon string) (int, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return -1, componentError(dir, name, canon, canon, err)
	}
	switch uint32(st.Mode) & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		return -1, &Error{Code: api.CodeManifestPathSymlink, Path: canon, Detail: "the directory is a symbolic link"}
	default:
		if err := checkType(uint32(st.Mode), canon); err != nil {
			return -1, err
		}
		return -1, &Error{Code: api.CodeManifestNotRegular, Path: canon, Detail: "not a directory"}
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, componentError(dir, name, canon, canon, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &Error{Code: api.CodeManifestUnreadable, Path: canon, Detail: "fstat", Err: err}
	}
	if err := checkOwnDir(&st, canon); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// checkOwnDir: a directory whose files the walk reads is a directory owned
// by the caller or root that no one else can write (else anyone could swap
// a file in it between the check and the use).
func checkOwnDir(st *unix.Stat_t, canon string) error {
	mode := uint32(st.Mode)
	if mode&unix.S_IFMT != unix.S_IFDIR {
		return &Error{Code: api.CodeManifestNotRegular, Path: canon, Detail: "not a directory"}
	}
	if uid := uint32(os.Geteuid()); st.Uid != uid && st.Uid != 0 {
		return &Error{Code: api.CodeManifestOwner, Path: canon, Detail: fmt.Sprintf("directory owned by uid %d, not by uid %d or root", st.Uid, uid)}
	}
	if mode&0o022 != 0 {
		return &Error{Code: api.CodeManifestPermissions, Path: canon, Detail: fmt.Sprintf("directory mode %04o is group- or world-writable (fix: chmod -R go-w %s)", mode&0o7777, canon)}
	}
	return nil
}

// walk reads the directory open as fd (canon for messages, rel its name in
// the result) and everything under it.
func (w *dirWalk) walk(fd int, canon, rel string, depth int) error {
	if depth > w.lim.MaxDepth {
		return &Error{Code: api.CodeManifestTooLarge, Path: canon, Detail: fmt.Sprintf("directories nested deeper than %d", w.lim.MaxDepth)}
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return &Error{Code: api.CodeManifestUnreadable, Path: canon, Detail: "dup", Err: err}
	}
	d := os.NewFile(uintptr(dup), canon)
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return &Error{Code: api.CodeManifestUnreadable, Path: canon, Detail: "read directory", Err: err}
	}
	if rel != "." {
		w.files[rel] = &fstest.MapFile{Mode: fs.ModeDir | 0o555}
	}
	for _, name := range names {
		w.entries++
		if w.entries > w.lim.MaxEntries {
			return &Error{Code: api.CodeManifestTooLarge, Path: canon, Detail: fmt.Sprintf("more than %d entries", w.lim.MaxEntries)}
		}
		path, entry := canon+"/"+name, name
		if rel != "." {
			entry = rel + "/" + name
		}
		if !fs.ValidPath(entry) {
			return &Error{Code: api.CodeManifestPathInvalid, Path: path, Detail: "a name fs.FS cannot hold"}
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return componentError(fd, name, path, path, err)
		}
		if uint32(st.Mode)&unix.S_IFMT == unix.S_IFDIR {
			sub, err := openDir(fd, name, path)
			if err != nil {
				return err
			}
			err = w.walk(sub, path, entry, depth+1)
			unix.Close(sub)
			if err != nil {
				return err
			}
			continue
		}
		data, err := w.readFile(fd, name, path)
		if err != nil {
			return err
		}
		w.files[entry] = &fstest.MapFile{Data: data, Mode: 0o444}
	}
	return nil
}

// readFile reads one regular file of the walk within what is left of the
// byte budget.
func (w *dirWalk) readFile(dir int, name, canon string) ([]byte, error) {
	f, err := openFinal(dir, name, canon)
	if err != nil {
		return nil, err
	}
	defer unix.Close(f)
	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil {
		return nil, &Error{Code: api.CodeManifestUnreadable, Path: canon, Detail: "fstat", Err: err}
	}
	left := w.lim.MaxBytes - w.bytes
	if err := checkFile(&st, canon, left); err != nil {
		var e *Error
		if errors.As(err, &e) && e.Code == api.CodeManifestTooLarge {
			e.Detail = fmt.Sprintf("the directory holds more than %d bytes", w.lim.MaxBytes)
		}
		return nil, err
	}
	data, err := readAtMost(f, left, st.Size)
	if err != nil {
		return nil, &Error{Code: api.CodeManifestUnreadable, Path: canon, Detail: "read", Err: err}
	}
	if int64(len(data)) > left {
		return nil, &Error{Code: api.CodeManifestTooLarge, Path: canon, Detail: fmt.Sprintf("the directory holds more than %d bytes", w.lim.MaxBytes)}
	}
	w.bytes += int64(len(data))
	return data, nil
}
