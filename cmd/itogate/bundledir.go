package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// bundleDirFS opens a policy bundle directory for eval and replay: the
// directory that holds ito/ (e.g. policies), as `opa build --bundle` takes
// it. A missing path, a file, or a directory one level too deep (policies/ito,
// where the data files would land at data.config instead of data.ito.config
// and every decision silently change) is refused with a message naming it.
func bundleDirFS(dir string) (fs.FS, error) {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("bundle %s: no such directory", dir)
	case err != nil:
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	case !st.IsDir():
		return nil, fmt.Errorf("bundle %s: not a directory (give the bundle's root directory, e.g. policies)", dir)
	}
	if st, err := os.Stat(filepath.Join(dir, "ito")); err != nil || !st.IsDir() {
		hint := ""
		if filepath.Base(filepath.Clean(dir)) == "ito" {
			hint = fmt.Sprintf(" (it looks like the ito/ directory itself: give its parent, %s)", filepath.Dir(filepath.Clean(dir)))
		}
		return nil, fmt.Errorf("bundle %s: not a bundle root: it holds no ito/ directory%s", dir, hint)
	}
	return os.DirFS(dir), nil
}
