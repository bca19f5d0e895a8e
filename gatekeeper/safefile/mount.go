package safefile

import (
	"errors"
	"fmt"
	"sync"
)

// ReadMounted reads at most limit bytes of the file at path with every check
// of ReadFile but one: inside the directory that holds the file (its mount
// directory), symbolic links are followed as long as they stay in it. That
// is the layout of a Kubernetes ConfigMap or Secret volume —
// name → ..data/name, ..data → ..2026_01_02_03_04_05.123 — which the kubelet
// updates by swapping ..data atomically; a server reading its keys and
// configuration from such a volume reads them through ReadMounted.
//
// The directories leading to the mount directory are walked as ReadFile
// walks them: a symbolic link there is still api.CodeManifestPathSymlink.
// Inside it, a link whose target is absolute, or that climbs above the mount
// directory with "..", is api.CodeManifestPathSymlink; more than 40 links
// are api.CodeManifestPathSymlink too. Every directory passed through must
// not be world-writable without the sticky bit (api.CodeManifestPermissions),
// but for the mount directory and the directories under it when they are
// owned by root and lie on a read-only mount: the kubelet makes a
// ConfigMap volume's directory 0777 and mounts it read-only (on Linux; off
// Linux no mount is taken as read-only).
// The file finally reached must be a regular file passing ReadFile's checks:
// a FIFO, device or socket is api.CodeManifestNotRegular without being
// opened (or, swapped in after the check, opened without blocking and
// refused), and more than limit bytes is api.CodeManifestTooLarge, read no
// further than limit+1 bytes.
func ReadMounted(path string, limit int64) ([]byte, error) {
	data, _, err := readMounted(path, limit)
	return data, err
}

// fileID names one file read: where it was asked for and the inode read
// (off Unix: its size and modification time).
type fileID struct {
	path        string
	dev, ino    uint64
	size, mtime int64
}

// Snapshot reads a set of files with ReadMounted and remembers which file
// each path led to, so that the reader can tell whether the set changed
// while it was being read: a Kubernetes volume swaps every file at once, and
// files read across a swap would mix two versions. Use one Snapshot per
// attempt (see Consistent). It is safe for concurrent use.
type Snapshot struct {
	mu   sync.Mutex
	read []fileID
}

// ReadFile is ReadMounted, remembered.
func (s *Snapshot) ReadFile(path string, limit int64) ([]byte, error) {
	data, id, err := readMounted(path, limit)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.read = append(s.read, id)
	s.mu.Unlock()
	return data, nil
}

// Changed reports the first path read whose file has since been replaced
// (the path now leads to another inode, or to none), or "" when none was.
// A file rewritten in place keeps its inode and is not seen here: write
// such files by rename, as Kubernetes does.
func (s *Snapshot) Changed() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.read {
		now, err := identify(id.path)
		if err != nil || now != id {
			return id.path
		}
	}
	return ""
}

// Consistent runs load with the ReadFile of a fresh Snapshot, again while a
// file it read was replaced before it returned, at most attempts times, and
// returns load's error. A set of files read across a Kubernetes volume
// update is read again, whole, from the new version; when the files keep
// changing past attempts it fails naming one of them.
func Consistent(attempts int, load func(read func(path string, limit int64) ([]byte, error)) error) error {
	if attempts <= 0 {
		return errors.New("safefile: attempts must be positive")
	}
	var changed string
	for range attempts {
		var s Snapshot
		if err := load(s.ReadFile); err != nil {
			return err
		}
		if changed = s.Changed(); changed == "" {
			return nil
		}
	}
	return fmt.Errorf("safefile: %s: replaced while being read, %d times in a row", changed, attempts)
}
