package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = ""
	if i := Get(); i.Version == "" || i.GoVersion != runtime.Version() {
		t.Fatalf("unstamped: %+v", i)
	}
	Version = "v9.8.7"
	i := Get()
	if i.Version != "v9.8.7" || !strings.HasPrefix(i.String(), "itogate v9.8.7 (") || !strings.HasSuffix(i.String(), runtime.Version()+")") {
		t.Fatalf("stamped: %+v %q", i, i.String())
	}
}

// TestCommitStamp: a build without VCS information (the container image's
// -buildvcs=false; a test binary has none either) reports the stamped
// revision.
func TestCommitStamp(t *testing.T) {
	old := Commit
	t.Cleanup(func() { Commit = old })
	Commit = "0123456789abcdef0123456789abcdef01234567"
	i := Get()
	if i.Commit != Commit || !strings.Contains(i.String(), "(commit "+Commit+", ") {
		t.Fatalf("stamped commit: %+v %q", i, i.String())
	}
}
