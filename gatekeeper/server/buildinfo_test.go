package server_test

import (
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/version"
)

// TestBuildInfoMetric: /metrics names the running binary.
func TestBuildInfoMetric(t *testing.T) {
	h := newHarness(t, nil)
	bi := version.Get()
	want := `itogate_build_info{commit="` + bi.Commit + `",go_version="` + bi.GoVersion + `",version="` + bi.Version + `"} 1`
	if body := h.metricsText(t); !strings.Contains(body, want) {
		t.Errorf("metrics without %s", want)
	}
}
