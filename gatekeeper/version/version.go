// Package version is the build's identity: what `itogate version` and
// `itogate --version` print, the itogate_build_info metric, and the version
// in the start-up log line and in /readyz.
package version

import (
	"runtime"
	"runtime/debug"
)

// Version is stamped at build time:
//
//	go build -ldflags "-X github.com/itocompute/itogate/gatekeeper/version.Version=v0.5.0" ./cmd/itogate
//
// Unstamped, it is the module version `go install …@version` recorded, else
// "devel".
var Version string

// Commit is the VCS revision, stamped where the build has no VCS
// information (`go build -buildvcs=false`, as the container image is
// built: its context has no .git):
//
//	go build -buildvcs=false -ldflags "-X github.com/itocompute/itogate/gatekeeper/version.Commit=$(git rev-parse HEAD)" ./cmd/itogate
//
// The revision Go records from the VCS wins when both are present.
var Commit string

// Info is the build's identity.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"` // VCS revision, "+dirty" when modified; empty when unknown
	GoVersion string `json:"go_version"`
}

// Get returns the build's identity.
func Get() Info {
	i := Info{Version: Version, Commit: Commit, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && i.Commit != "" {
			i.Commit += "+dirty"
		}
	}
	if i.Version == "" {
		i.Version = "devel"
	}
	return i
}

// String is the line `itogate version` prints: "itogate v0.5.0 (commit
// 1e43009…, go1.26.0)".
func (i Info) String() string {
	s := "itogate " + i.Version + " ("
	if i.Commit != "" {
		s += "commit " + i.Commit + ", "
	}
	return s + i.GoVersion + ")"
}
