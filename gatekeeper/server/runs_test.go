package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// TestRunRoutes: GET /v1/runs/{run_id} and GET /v1/runs through HTTP: a
// created run reads back live with its create's decision id; an unknown run
// is 404 RUN_STATUS_NOT_FOUND; the list is strict about its query; both
// need the caller's bearer token.
func TestRunRoutes(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	m, err := h.runner.LoadManifest("llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	created, _, err := h.runner.Create(ctx, m, h.runner.Key("create"))
	if err != nil || created.Status != http.StatusOK {
		t.Fatalf("create: %+v, %v", created, err)
	}
	status, env, err := h.runner.RunStatus(ctx, created.Data.RunID)
	if err != nil || status != http.StatusOK || env.Data.State != api.RunLive || len(env.Data.Events) != 1 ||
		env.Data.Events[0].DecisionID != created.Data.DecisionID {
		t.Fatalf("GET /v1/runs/{run_id} = %d %+v, %v", status, env, err)
	}
	if status, env, _ := h.runner.RunStatus(ctx, "run_00000000000000000000000000"); status != http.StatusNotFound ||
		env.Error == nil || env.Error.Code != api.CodeRunStatusNotFound {
		t.Fatalf("unknown run: %d %+v", status, env.Error)
	}
	token, err := h.runner.CallerToken()
	if err != nil {
		t.Fatal(err)
	}
	get := func(path, bearer string) (int, api.Envelope[api.RunList]) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL+path, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var env api.Envelope[api.RunList]
		if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
			t.Fatalf("GET %s: not an envelope: %v", path, err)
		}
		return resp.StatusCode, env
	}
	if code, env := get("/v1/runs?state=live&limit=10", token); code != http.StatusOK || len(env.Data.Runs) != 1 ||
		env.Data.Runs[0].RunID != created.Data.RunID {
		t.Fatalf("GET /v1/runs = %d %+v", code, env)
	}
	for _, path := range []string{"/v1/runs?color=red", "/v1/runs?limit=0", "/v1/runs?limit=x", "/v1/runs?limit=201",
		"/v1/runs?state=running", "/v1/runs?state=live&state=halted", "/v1/runs?after=run%201"} {
		if code, env := get(path, token); code != http.StatusBadRequest || env.Error == nil || env.Error.Code != api.CodeRequestInvalid {
			t.Errorf("GET %s = %d %+v, want 400 REQUEST_INVALID", path, code, env.Error)
		}
	}
	for _, path := range []string{"/v1/runs", "/v1/runs/" + created.Data.RunID} {
		if code, env := get(path, ""); code != http.StatusUnauthorized || env.Error == nil || env.Error.Code != api.CodeCallerUnauthenticated {
			t.Errorf("GET %s without a token = %d %+v", path, code, env.Error)
		}
	}
}
