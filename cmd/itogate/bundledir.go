package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/policies"
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

// offlineEngine is the policy engine of eval and plan: the bundle directory
// dir (bundleDirFS), or the embedded bundle when dir is "", with deadline
// bounding each decision. A bundle that does not compile is bad input: the
// embedded one compiles (its tests say so), so it is the directory given.
func offlineEngine(ctx context.Context, dir string, deadline time.Duration) (*policy.Engine, error) {
	bundle := policies.Bundle()
	if dir != "" {
		var err error
		if bundle, err = bundleDirFS(dir); err != nil {
			return nil, badInput(err)
		}
	}
	engine, err := policy.New(ctx, policy.Options{Bundle: bundle, Deadline: deadline})
	if err != nil {
		return nil, badInput(err)
	}
	return engine, nil
}

// evalTime is the evaluation time of the --now flag: unix seconds, or the
// clock when 0.
func evalTime(unix int64) time.Time {
	if unix != 0 {
		return time.Unix(unix, 0)
	}
	return time.Now()
}
