package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
)

// admitFixture posts fixtures/manifests/<name>.json through the real API with
// a matching entitlement (2.49 USD per GPU-hour) and a confirmation for cost,
// and returns the status and the envelope.
func admitFixture(t *testing.T, h *harness, name, cost string) (int, map[string]any) {
	t.Helper()
	body, _ := fixtureRequest(t, h, name, cost)
	return post(t, h, "/v1/admissions", "application/json", callerToken(t, h), body)
}

// fixtureRequest is admitFixture's request body and its idempotency key.
func fixtureRequest(t *testing.T, h *harness, name, cost string) ([]byte, string) {
	t.Helper()
	ctx := context.Background()
	m, err := h.runner.LoadManifest(name)
	if err != nil {
		t.Fatal(err)
	}
	ent, err := h.runner.EntitlementFor(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := h.runner.Confirm(ctx, "train.create", manifest.Digest(m.Raw), cost, "")
	if err != nil {
		t.Fatal(err)
	}
	key := h.runner.Key(name)
	body, _ := json.Marshal(map[string]any{
		"action": "train.create", "booking_id": scenario.Booking, "idempotency_key": key,
		"manifest": base64.StdEncoding.EncodeToString(m.Raw), "manifest_signature": m.Signature,
		"entitlement_token": ent, "confirmation_ref": ref,
	})
	return body, key
}

func estimatesOf(t *testing.T, env map[string]any) map[string]any {
	t.Helper()
	for _, part := range []string{"data", "error"} {
		if p, ok := env[part].(map[string]any); ok {
			if e, ok := p["estimates"].(map[string]any); ok {
				return e
			}
		}
	}
	t.Fatalf("no estimates in %v", env)
	return nil
}

// TestExactMoneyOverHTTP: 8 GPUs × 6 h at "2.49" is 119.52 USD exactly (float
// arithmetic gives 119.52000000000001), and the 0.03 GPU-hours expected
// lost to failures 0.08. The fixture's ceiling is its exact total, 119.60
// compute + 2.42 storage: it is admitted with a confirmation for exactly
// that, and refused with one cent less.
func TestExactMoneyOverHTTP(t *testing.T) {
	h := newHarness(t, nil)
	status, env := admitFixture(t, h, "megatron-llama3-8b-h100-fp8", "122.02")
	if status != 200 {
		t.Fatalf("status %d, want 200: %v", status, env)
	}
	est := estimatesOf(t, env)
	for k, want := range map[string]any{
		"gpu_hours": "48.00", "lost_gpu_hours": "0.03", "lost_work_cost_usd": "0.08",
		"compute_cost_usd": "119.60", "compute_cost_micro_usd": float64(119600000), "expected_goodput": 0.9995,
		"storage_cost_usd": "2.42", "total_cost_usd": "122.02", "total_cost_micro_usd": float64(122020000),
	} {
		if got := est[k]; got != want {
			t.Errorf("estimates.%s = %v, want %v", k, got, want)
		}
	}

	status, env = admitFixture(t, h, "megatron-llama3-8b-h100-fp8", "122.01")
	if status != 403 || !hasViolation(env, "CONFIRMATION_COST_BELOW_ESTIMATE") {
		t.Fatalf("status %d %v, want 403 with CONFIRMATION_COST_BELOW_ESTIMATE", status, env["error"])
	}
}

// TestParallelismFixesOverHTTP: a parallelism deny carries a fix on every
// parallelism violation and the structured fix under error.estimates.fix_layout.
func TestParallelismFixesOverHTTP(t *testing.T) {
	h := newHarness(t, nil)
	for _, tc := range []struct {
		name, cost string
		want       map[string]string
	}{
		{"llama2-70b-v100-fsdp", "600.00", map[string]string{
			"on_booked_hardware": "false", "nodes": "6", "tensor": "8", "pipeline": "6", "precision": "fp16",
		}},
		// one node cannot hold Mixtral's states: ep 8 over tp 8 × pp 2 on two nodes (within the memory margin)
		{"mixtral-8x7b-megatron-as-shipped", "150.00", map[string]string{
			"on_booked_hardware": "false", "nodes": "2", "pipeline": "2", "expert": "8", "changes": "[tensor 1 → 8 pipeline 4 → 2]",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, env := admitFixture(t, h, tc.name, tc.cost)
			if status != 403 {
				t.Fatalf("status %d, want 403: %v", status, env)
			}
			errBody, _ := env["error"].(map[string]any)
			violations, _ := errBody["violations"].([]any)
			for _, raw := range violations {
				v, _ := raw.(map[string]any)
				if v["gate"] == "parallelism" && v["fix"] == nil {
					t.Errorf("%v has no fix", v["code"])
				}
			}
			fix, _ := estimatesOf(t, env)["fix_layout"].(map[string]any)
			for k, want := range tc.want {
				if got := fmt.Sprint(fix[k]); got != want {
					t.Errorf("fix_layout.%s = %s, want %s", k, got, want)
				}
			}
		})
	}
}

func hasViolation(env map[string]any, code string) bool {
	errBody, _ := env["error"].(map[string]any)
	violations, _ := errBody["violations"].([]any)
	for _, raw := range violations {
		if v, _ := raw.(map[string]any); v["code"] == code {
			return true
		}
	}
	return false
}
