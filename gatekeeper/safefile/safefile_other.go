//go:build !unix

package safefile

import (
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// ReadManifest is not supported off Unix: the checks it promises need
// O_NOFOLLOW, openat and owner uids. It always fails with api.CodeManifestUnreadable.
func ReadManifest(path string, limit int64) (data []byte, digest string, err error) {
	return nil, "", &Error{Code: api.CodeManifestUnreadable, Path: path, Detail: "not supported on this platform"}
}

// ReadFile is not supported off Unix (see ReadManifest).
func ReadFile(path string, limit int64) ([]byte, error) {
	return nil, &Error{Code: api.CodeManifestUnreadable, Path: path, Detail: "not supported on this platform"}
}

// Open is not supported off Unix (see ReadManifest).
func Open(path string) (*os.File, error) {
	return nil, &Error{Code: api.CodeManifestUnreadable, Path: path, Detail: "not supported on this platform"}
}

// DirLimits bound ReadDir (see the Unix build).
type DirLimits struct {
	MaxBytes   int64
	MaxEntries int
	MaxDepth   int
}

// ReadDir is not supported off Unix (see ReadManifest).
func ReadDir(path string, lim DirLimits) (fs.FS, error) {
	return nil, &Error{Code: api.CodeManifestUnreadable, Path: path, Detail: "not supported on this platform"}
}

// readMounted off Unix is a bounded read of a regular file: the descriptor
// checks of the Unix build are not available, but a FIFO, a device or an
// oversize file is still refused.
func readMounted(path string, limit int64) ([]byte, fileID, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fileID{}, &Error{Code: api.CodeManifestNotFound, Path: path, Detail: "stat", Err: err}
	}
	if !st.Mode().IsRegular() {
		return nil, fileID{}, &Error{Code: api.CodeManifestNotRegular, Path: path, Detail: "is not a regular file"}
	}
	if st.Size() > limit {
		return nil, fileID{}, &Error{Code: api.CodeManifestTooLarge, Path: path, Detail: fmt.Sprintf("%d bytes, limit %d", st.Size(), limit)}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fileID{}, &Error{Code: api.CodeManifestUnreadable, Path: path, Detail: "open", Err: err}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fileID{}, &Error{Code: api.CodeManifestUnreadable, Path: path, Detail: "read", Err: err}
	}
	if int64(len(data)) > limit {
		return nil, fileID{}, &Error{Code: api.CodeManifestTooLarge, Path: path, Detail: fmt.Sprintf("more than %d bytes", limit)}
	}
	return data, fileID{path: path, size: st.Size(), mtime: st.ModTime().UnixNano()}, nil
}

// identify off Unix names a file by its size and modification time.
func identify(path string) (fileID, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	return fileID{path: path, size: st.Size(), mtime: st.ModTime().UnixNano()}, nil
}
