//go:build unix && !linux

package safefile

import "golang.org/x/sys/unix"

// dirOpenFlags: without O_PATH the walk opens directories for reading, so
// it needs read permission on each one.
const dirOpenFlags = unix.O_RDONLY

// readOnlyMount reports false off Linux: no mount is taken as read-only
// (checkMountDir then refuses what checkDir refuses).
func readOnlyMount(int) bool { return false }
