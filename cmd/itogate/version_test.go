package main

import (
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/version"
)

// TestVersion: `itogate version` and `itogate --version` print the same
// one line, the version stamped at build time (-X …/version.Version).
func TestVersion(t *testing.T) {
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	version.Version = "v1.2.3-test"
	want := version.Get().String() + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		res := runCLI(t, args...)
		if res.exit != 0 || res.stdout != want || res.stderr != "" {
			t.Errorf("itogate %s: exit %d, stdout %q, stderr %q; want %q", strings.Join(args, " "), res.exit, res.stdout, res.stderr, want)
		}
	}
	if !strings.HasPrefix(want, "itogate v1.2.3-test (") {
		t.Errorf("version line %q", want)
	}
}
