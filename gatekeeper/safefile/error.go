// Package safefile reads a training manifest for the itogate client the
// careful way (docs/security.md §7): no symlink anywhere in the path, a regular file
// owned by the caller or root and writable by no one else, at most a bounded
// number of bytes, all taken from one descriptor so the digest covers exactly
// the bytes that are sent.
package safefile

import "github.com/itocompute/itogate/gatekeeper/api"

// Each refusal has its stable code in the api registry (the CLI prints them
// and scripts match on them): api.CodeManifestPathInvalid (empty path, NUL
// byte, or a path that names a directory by its form), CodeManifestNotFound
// (a component does not exist or is not a directory),
// CodeManifestPathSymlink (a component, the last included, is a symbolic
// link), CodeManifestNotRegular (a directory, FIFO, socket or device),
// CodeManifestPermissions (group- or world-writable, or a world-writable
// directory on the path without the sticky bit), CodeManifestOwner (owned
// by neither the caller nor root), CodeManifestTooLarge (more bytes than
// the limit) and CodeManifestUnreadable (any other failure to open, stat or
// read).

// Sentinels for errors.Is: an *Error matches the sentinel with its Code, as
// in errors.Is(err, safefile.ErrTooLarge).
var (
	ErrPathInvalid = &Error{Code: api.CodeManifestPathInvalid}
	ErrNotFound    = &Error{Code: api.CodeManifestNotFound}
	ErrSymlink     = &Error{Code: api.CodeManifestPathSymlink}
	ErrNotRegular  = &Error{Code: api.CodeManifestNotRegular}
	ErrPermissions = &Error{Code: api.CodeManifestPermissions}
	ErrOwner       = &Error{Code: api.CodeManifestOwner}
	ErrTooLarge    = &Error{Code: api.CodeManifestTooLarge}
	ErrUnreadable  = &Error{Code: api.CodeManifestUnreadable}
)

// Error is every refusal ReadManifest returns. Map it to output by Code.
type Error struct {
	// Code is one of the codes above.
	Code api.Code
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
	msg := "safefile: " + string(e.Code)
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
