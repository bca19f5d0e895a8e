package safefile

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile writes data to path without ever writing through what is
// already there: the bytes go to a new file created exclusively (O_EXCL) in
// the same directory, are synced, and the new file is renamed over path.
// A symlink planted at path is replaced, not followed, so no other file is
// overwritten; a reader never sees a half-written file. perm is the new
// file's mode, set exactly (the umask does not apply).
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if base == "" || base == "." || base == ".." {
		return fmt.Errorf("safefile: %q names no file", path)
	}
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Chmod(perm); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
