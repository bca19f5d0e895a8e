//go:build linux

package bolt

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// lockHolder names the process holding path's file lock, for the error a
// second itogate on the same ledger gets: " (pid N)" when /proc/locks (Linux)
// names it, "" otherwise. It only reads; it never touches the lock.
func lockHolder(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return ""
	}
	defer f.Close()
	return holderIn(bufio.NewScanner(f), st.Ino)
}

// holderIn scans /proc/locks lines such as
// "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF" for a lock on inode ino.
func holderIn(sc *bufio.Scanner, ino uint64) string {
	suffix := fmt.Sprintf(":%d", ino)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 6 && f[1] != "->" && strings.HasSuffix(f[5], suffix) {
			return " (pid " + f[4] + ")"
		}
	}
	return ""
}
