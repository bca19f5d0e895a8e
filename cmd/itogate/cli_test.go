package main

import (
	"bytes"
	"context"
	"github.com/itocompute/itogate/policies"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/itocompute/itogate/internal/patience"
)

// The in-process CLI runner of this package's tests, on every platform
// (the hostile-file tests that also use it are unix-only).

// cliResult is one CLI run: the process exit status main would give and
// what it printed.
type cliResult struct {
	exit           int
	stdout, stderr string
}

// runCLI runs the root command in-process as main does, including main's
// mapping of errors to exit statuses and messages.
func runCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	return runCLIStdin(t, "", args...)
}

// runCLIStdin is runCLI with stdin as the standard input.
func runCLIStdin(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), patience.Deadline)
	defer cancel()
	code := runContext(ctx, args, strings.NewReader(stdin), &out, &errb)
	return cliResult{exit: code, stdout: out.String(), stderr: errb.String()}
}

// writeMode writes data to path with mode, past the umask.
func writeMode(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// mustRead is path's content, or the test fails.
func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// copyPolicies writes the embedded policies to dir, 0700 directories and
// 0600 files whatever the umask, and returns dir.
func copyPolicies(t *testing.T, dir string) string {
	t.Helper()
	if err := os.CopyFS(dir, policies.Bundle()); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, 0o700)
		}
		return os.Chmod(p, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
