package runtime_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/runtime"
	"github.com/itocompute/itogate/gatekeeper/runtime/runtimetest"
	"github.com/itocompute/itogate/internal/syncbuf"
)

// gpuJobReview is the AdmissionReview of a CREATE of a GPU Job without a
// ticket in namespace ns, as the apiserver sends it.
func gpuJobReview(ns string) []byte {
	obj, _ := json.Marshal(map[string]any{"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": "train", "namespace": ns, "uid": "uid-job"},
		"spec": map[string]any{"parallelism": 1, "template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "t", "image": "t",
				"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": 8}}}}}}}})
	body, _ := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{"uid": "req-1", "operation": "CREATE",
			"kind":      map[string]any{"group": "batch", "version": "v1", "kind": "Job"},
			"resource":  map[string]any{"group": "batch", "version": "v1", "resource": "jobs"},
			"namespace": ns, "name": "train", "userInfo": map[string]any{"username": "alice"},
			"object": json.RawMessage(obj)}})
	return body
}

// reviewCode posts the review to the webhook handler and returns the stable
// code leading its denial ("" when allowed).
func reviewCode(t *testing.T, h http.Handler, ns string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(gpuJobReview(ns)))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	var out struct {
		Response struct {
			Allowed bool
			Status  struct{ Message string }
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("not a review: %d %s", rec.Code, rec.Body)
	}
	if out.Response.Allowed {
		return ""
	}
	code, _, _ := strings.Cut(out.Response.Status.Message, ":")
	return code
}

// TestReloadNamespaceBindings: a reload binds a new namespace — a review in
// it, refused WORKLOAD_NAMESPACE_UNBOUND before, reaches the ticket check
// after (WORKLOAD_TICKET_MISSING) — through the same webhook handler; a
// reload that fails (a namespace bound to an empty account, or a loader
// error) keeps the bindings, is logged once at error level and counted.
// Other sections changed are named in a warning and not applied.
func TestReloadNamespaceBindings(t *testing.T) {
	certFile, keyFile := writeCert(t, t.TempDir())
	cfg := runtimetest.Config(t, "webhook.listen=127.0.0.1:0", "webhook.cert_file="+certFile,
		"webhook.key_file="+keyFile, "webhook.namespaces.team-a=acct_demo")
	logs := &syncbuf.Buffer{}
	rt := runtimetest.Open(t, cfg, runtime.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	hook := rt.WebhookHandler()
	if got := reviewCode(t, hook, "team-b"); got != "WORKLOAD_NAMESPACE_UNBOUND" {
		t.Fatalf("before the reload: %q", got)
	}
	with := func(sets ...string) func(config.ReadFunc) (config.Config, error) {
		return func(config.ReadFunc) (config.Config, error) {
			c := cfg
			w := *cfg.Webhook
			c.Webhook = &w
			c.Webhook.Namespaces = map[string]string{"team-a": "acct_demo"}
			return c, c.SetAll(sets...)
		}
	}
	if err := rt.Reload(with("webhook.namespaces.team-b=", "limits.max_body_bytes=1024")); err == nil {
		t.Fatal("a namespace bound to an empty account reloaded")
	}
	if err := rt.Reload(func(config.ReadFunc) (config.Config, error) { return config.Config{}, errors.New("config: boom") }); err == nil ||
		err.Error() != "config: boom" {
		t.Fatalf("a failing loader: %v", err)
	}
	if got := reviewCode(t, hook, "team-b"); got != "WORKLOAD_NAMESPACE_UNBOUND" {
		t.Fatalf("after failed reloads: %q", got)
	}
	if err := rt.Reload(with("webhook.namespaces.team-b=acct_demo", "limits.max_body_bytes=1024")); err != nil {
		t.Fatal(err)
	}
	if got := reviewCode(t, hook, "team-b"); got != "WORKLOAD_TICKET_MISSING" {
		t.Fatalf("after the reload: %q", got)
	}
	if got := rt.Config(); got.Webhook.Namespaces["team-b"] != "acct_demo" || got.Limits.MaxBodyBytes != 0 {
		t.Fatalf("configuration in force: %v, max_body_bytes %d", got.Webhook.Namespaces, got.Limits.MaxBodyBytes)
	}
	var errs, infos, warns []map[string]any
	for _, l := range logLines(t, logs.String()) {
		switch msg, _ := l["msg"].(string); {
		case msg == "reload failed; the previous trust keys and namespace bindings stay in force":
			errs = append(errs, l)
		case msg == "reloaded trust keys and namespace bindings":
			infos = append(infos, l)
		case strings.HasPrefix(msg, "reload: "):
			warns = append(warns, l)
		}
	}
	if len(errs) != 2 || errs[0]["level"] != "ERROR" || !strings.Contains(errs[0]["err"].(string), "webhook: namespaces: empty namespace or account") {
		t.Fatalf("error lines: %v", errs)
	}
	if len(infos) != 1 || infos[0]["namespaces"] != float64(2) {
		t.Fatalf("success lines: %v", infos)
	}
	if len(warns) != 1 || warns[0]["level"] != "WARN" || len(warns[0]["sections"].([]any)) != 1 || warns[0]["sections"].([]any)[0] != "limits" {
		t.Fatalf("warning lines: %v", warns)
	}
	srv := runtimetest.Serve(t, rt, rt.Handler())
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`itogate_reloads_total{result="failure"} 2`, `itogate_reloads_total{result="success"} 1`} {
		if !strings.Contains(body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
