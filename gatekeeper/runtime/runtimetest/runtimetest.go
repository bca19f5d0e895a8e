// Package runtimetest starts itogate's runtime inside a test, wired exactly
// as `itogate serve` wires it in development mode (the embedded bundle, a
// bbolt ledger and the decision log in a temporary data directory, the
// published development keys), with bounds no machine hits
// (internal/patience). It is OPA's NewTestRuntime for itogate.
package runtimetest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/runtime"
	"github.com/itocompute/itogate/internal/patience"
)

// Config is config.Dev() for one test: a fresh data directory, a free
// loopback port (127.0.0.1:0), patience.Deadline as the policy deadline and
// the request timeout (a test about a deadline sets its own), no bound on
// concurrent evaluations (tests burst more admissions than the default
// queue lets wait on two shared cores; shedding is tested with a bound of
// its own), then the --set assignments ("key=value"), in order.
func Config(t testing.TB, sets ...string) config.Config {
	t.Helper()
	c := config.Dev()
	c.Listen = "127.0.0.1:0"
	c.DataDir = t.TempDir()
	c.Policy.Deadline = config.Duration(patience.Deadline)
	c.Limits.RequestTimeout = config.Duration(patience.Deadline)
	c.Limits.MaxConcurrentEvaluations = -1
	if err := c.SetAll(sets...); err != nil {
		t.Fatal(err)
	}
	return c
}

// Open opens a runtime on cfg (runtime.Open) and closes it when the test
// ends.
func Open(t testing.TB, cfg config.Config, opts runtime.Options) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.Open(t.Context(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("runtime close: %v", err)
		}
	})
	return rt
}

// Serve serves h — rt.Handler(), or a test's wrapper of it — on a loopback
// port with the http.Server settings Run uses (header limit, timeouts), and
// closes it when the test ends, before the runtime.
func Serve(t testing.TB, rt *runtime.Runtime, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config = rt.HTTPServer(h)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}
