//go:build !unix

package safefile

import (
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
