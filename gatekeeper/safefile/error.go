// Package safefile reads a training manifest for the itogate client the
// careful way (docs/security.md §7): no symlink anywhere in the path, a regular file
// owned by the caller or root and writable by no one else, at most a bounded
// number of bytes, all taken from one descriptor so the digest covers exactly
// the bytes that are sent.
package safefile

// Stable failure codes, one per refusal. The CLI prints them and scripts
// match on them; once released they never change.
const (
	// CodePathInvalid: empty path, NUL byte, or a path that names a
	// directory by its form (trailing slash, final "." or "..").
	CodePathInvalid = "MANIFEST_PATH_INVALID"
	// CodeNotFound: a component of the path does not exist or is not a
	// directory.
	CodeNotFound = "MANIFEST_NOT_FOUND"
	// CodeSymlink: some component of the path, including the last, is a
	// symbolic link.
	CodeSymlink = "MANIFEST_PATH_SYMLINK"
	// CodeNotRegular: the file is a directory, FIFO, socket or device.
	CodeNotRegular = "MANIFEST_NOT_REGULAR"
	// CodePermissions: the file is group- or world-writable, or a directory
	// on the path is world-writable without the sticky bit.
	CodePermissions = "MANIFEST_PERMISSIONS"
	// CodeOwner: the file is owned by neither the caller nor root.
	CodeOwner = "MANIFEST_OWNER"
	// CodeTooLarge: the file holds more bytes than the limit.
	CodeTooLarge = "MANIFEST_TOO_LARGE"
	// CodeUnreadable: any other failure to open, stat or read (permission
	// denied, I/O error, unsupported platform).
	CodeUnreadable = "MANIFEST_UNREADABLE"
)

// Sentinels for errors.Is: an *Error matches the sentinel with its Code, as
// in errors.Is(err, safefile.ErrTooLarge).
var (
	ErrPathInvalid = &Error{Code: CodePathInvalid}
	ErrNotFound    = &Error{Code: CodeNotFound}
	ErrSymlink     = &Error{Code: CodeSymlink}
	ErrNotRegular  = &Error{Code: CodeNotRegular}
	ErrPermissions = &Error{Code: CodePermissions}
	ErrOwner       = &Error{Code: CodeOwner}
	ErrTooLarge    = &Error{Code: CodeTooLarge}
	ErrUnreadable  = &Error{Code: CodeUnreadable}
)

// Error is every refusal ReadManifest returns. Map it to output by Code.
type Error struct {
	// Code is one of the Code constants.
	Code string
	// Path is the canonical absolute path being read, or the path as given
	// when it could not be made absolute.
	Path string
	// Detail says what exactly was refused, for humans; it never contains
	// file contents.
	Detail string
	// Err is the underlying system error, if any.
	Err error
}

func (e *Error) Error() string {
	msg := "safefile: " + e.Code
	if e.Path != "" {
		msg += ": " + e.Path
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same Code, which makes
// the sentinels work with errors.Is.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}
