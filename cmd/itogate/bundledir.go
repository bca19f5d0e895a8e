package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/safefile"
)

// bundleDirLimits bound a bundle directory as the server bounds a bundle
// archive's contents.
var bundleDirLimits = safefile.DirLimits{
	MaxBytes:   bundle.DefaultMaxUnpackedBytes,
	MaxEntries: bundle.DefaultMaxFiles,
	MaxDepth:   32,
}

// bundleDirFS reads a policy bundle directory for eval and replay through
// the safe reader (safefile.ReadDir: no symlink, FIFO or device anywhere,
// owner and mode checked, bounded): the directory that holds ito/ (e.g.
// policies), as `opa build --bundle` takes it. A missing path, a file, or a
// directory one level too deep (policies/ito, where the data files would
// land at data.config instead of data.ito.config and every decision
// silently change) is refused with a message naming it.
func bundleDirFS(dir string) (fs.FS, error) {
	fsys, err := safefile.ReadDir(dir, bundleDirLimits)
	var fe *safefile.Error
	switch {
	case errors.Is(err, safefile.ErrNotFound) && errors.As(err, &fe) && fe.Path == absPath(dir):
		return nil, fmt.Errorf("bundle %s: no such directory (%w)", dir, err)
	case errors.Is(err, safefile.ErrNotRegular) && errors.As(err, &fe) && fe.Path == absPath(dir):
		return nil, fmt.Errorf("bundle %s: not a directory (give the bundle's root directory, e.g. policies): %w", dir, err)
	case err != nil:
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	if st, err := fs.Stat(fsys, "ito"); err != nil || !st.IsDir() {
		hint := ""
		if filepath.Base(filepath.Clean(dir)) == "ito" {
			hint = fmt.Sprintf(" (it looks like the ito/ directory itself: give its parent, %s)", filepath.Dir(filepath.Clean(dir)))
		}
		return nil, fmt.Errorf("bundle %s: not a bundle root: it holds no ito/ directory%s", dir, hint)
	}
	return fsys, nil
}

// absPath is path made absolute and clean, as safefile names it.
func absPath(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	return abs
}
