package safefile

import "golang.org/x/sys/unix"

// dirOpenFlags opens directories on the path with O_PATH: the walk only
// needs search permission, as the kernel's own path lookup does, not read
// permission (a home directory is often 0711).
const dirOpenFlags = unix.O_PATH
