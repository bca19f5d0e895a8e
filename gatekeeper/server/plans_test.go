package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/scenario"
)

// TestPlanRoute: POST /v1/plans returns ranked plans for the caller's
// booking and leaves the ledger as it was (the booking's usage, the runs,
// no admission under any key); each proposed manifest, signed and
// confirmed, is then admitted by the server. Without the caller's token it
// is 401.
func TestPlanRoute(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	m, err := h.runner.LoadManifest("llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	if created, _, err := h.runner.Create(ctx, m, h.runner.Key("create")); err != nil || created.Status != http.StatusOK {
		t.Fatalf("create: %+v, %v", created, err)
	}
	ent, err := h.runner.EntitlementFor(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	token, err := h.runner.CallerToken()
	if err != nil {
		t.Fatal(err)
	}
	post := func(bearer string, req api.PlanRequest) (int, api.Envelope[policy.PlanResult]) {
		t.Helper()
		body, _ := json.Marshal(req)
		hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+"/v1/plans", bytes.NewReader(body))
		hr.Header.Set("Content-Type", "application/json")
		if bearer != "" {
			hr.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var env api.Envelope[policy.PlanResult]
		if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
			t.Fatalf("not an envelope: %v", err)
		}
		return resp.StatusCode, env
	}
	snapshot := func() any {
		t.Helper()
		u, err := h.store.BookingUsage(ctx, scenario.Booking, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	req := api.PlanRequest{BookingID: scenario.Booking, Manifest: m.Raw, ManifestSignature: m.Signature, EntitlementToken: ent}
	before := snapshot()
	code, env := post(token, req)
	if code != http.StatusOK || !env.OK || len(env.Data.Plans) == 0 {
		t.Fatalf("POST /v1/plans = %d %+v", code, env.Error)
	}
	if after := snapshot(); !reflect.DeepEqual(before, after) {
		t.Errorf("the booking's usage changed: %+v → %+v", before, after)
	}
	if a, err := h.runner.Status(ctx, "plan"); err != nil || a.Status != http.StatusNotFound {
		t.Errorf("an admission under the plan's key: %+v, %v", a, err)
	}
	if code, env := post("", req); code != http.StatusUnauthorized || env.Error == nil || env.Error.Code != api.CodeCallerUnauthenticated {
		t.Errorf("without a caller token: %d %+v", code, env.Error)
	}
	// the first plan, signed and confirmed, is admitted by the server
	raw, err := json.Marshal(env.Data.Plans[0].Manifest)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := h.runner.SignManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	if a, _, err := h.runner.Create(ctx, signed, h.runner.Key("plan")); err != nil || a.Status != http.StatusOK {
		t.Fatalf("create the plan's manifest: %+v, %v", a, err)
	}
}
