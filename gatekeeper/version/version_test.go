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
