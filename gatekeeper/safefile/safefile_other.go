//go:build !unix

package safefile

// ReadManifest is not supported off Unix: the checks it promises need
// O_NOFOLLOW, openat and owner uids. It always fails with CodeUnreadable.
func ReadManifest(path string, limit int64) (data []byte, digest string, err error) {
	return nil, "", &Error{Code: CodeUnreadable, Path: path, Detail: "not supported on this platform"}
}
