package policy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
)

// TestImpureBundleNeverCompiles: policies are pure (docs/architecture.md §4). Every OPA
// built-in marked non-deterministic (network, clock, randomness, runtime
// environment) makes New fail, in the decision and in the mask policy, so
// such a bundle is never activated and never reaches the network.
func TestImpureBundleNeverCompiles(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	if len(impureBuiltins()) < 8 {
		t.Fatalf("only %d non-deterministic built-ins found", len(impureBuiltins()))
	}
	for _, name := range []string{"http.send", "net.lookup_ip_addr", "opa.runtime", "time.now_ns", "rand.intn", "uuid.rfc4122"} {
		if _, ok := impureBuiltins()[name]; !ok {
			t.Errorf("%s is not refused", name)
		}
	}
	for name, fsys := range map[string]map[string]string{
		"http.send in the decision": {"ito/admission/a.rego": "package ito.admission\n\ndecision := {\"allow\": http.send({\"method\": \"GET\", \"url\": \"" + srv.URL + "\"}).status_code == 200, \"violations\": []}\n"},
		"opa.runtime in a helper": {
			"ito/admission/a.rego": "package ito.admission\n\ndecision := {\"allow\": false, \"violations\": [{\"code\": \"X\", \"gate\": \"g\", \"message\": data.ito.lib.env}]}\n",
			"ito/lib/lib.rego":     "package ito.lib\n\nenv := sprintf(\"%v\", [opa.runtime().env])\n",
		},
		"http.send in the mask policy": {
			"ito/admission/a.rego":  "package ito.admission\n\ndecision := {\"allow\": true, \"violations\": []}\n",
			"ito/system/log/m.rego": "package ito.system.log\n\nmask contains \"/x\" if http.send({\"method\": \"GET\", \"url\": \"" + srv.URL + "\"}).status_code == 200\n",
		},
		"time.now_ns": {"ito/admission/a.rego": "package ito.admission\n\ndecision := {\"allow\": time.now_ns() > input.now, \"violations\": []}\n"},
	} {
		t.Run(name, func(t *testing.T) {
			b := fstest.MapFS{}
			for p, src := range fsys {
				b[p] = &fstest.MapFile{Data: []byte(src)}
			}
			_, err := New(context.Background(), Options{Bundle: b, SkipRequiredRules: true})
			if err == nil || !strings.Contains(err.Error(), "unsafe built-in") {
				t.Fatalf("New = %v, want an unsafe built-in refusal", err)
			}
		})
	}
	if hits.Load() != 0 {
		t.Fatalf("the network was reached %d times", hits.Load())
	}
}
