package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
)

// telemetry is an entitlement tweak: a telemetry claim measured age
// before now over a week, with rate interruptions per GPU-hour.
func telemetry(rate any, age time.Duration) func(map[string]any) {
	return func(c map[string]any) {
		iat, _ := c["iat"].(int64)
		c["telemetry"] = map[string]any{
			"measured_at": iat - int64(age/time.Second), "window_seconds": 604800, "interruptions_per_gpu_hour": rate,
		}
	}
}

// telemetryRequest is fixtureRequest with the entitlement tweaked, and the
// confirmation reference too.
func telemetryRequest(t *testing.T, h *harness, name, cost string, tweak func(map[string]any)) (body []byte, ref, key string) {
	t.Helper()
	m, err := h.runner.LoadManifest(name)
	if err != nil {
		t.Fatal(err)
	}
	ent, err := h.runner.EntitlementFor(m, tweak)
	if err != nil {
		t.Fatal(err)
	}
	ref, err = h.runner.Confirm(context.Background(), "train.create", manifest.Digest(m.Raw), cost, "")
	if err != nil {
		t.Fatal(err)
	}
	key = h.runner.Key(name)
	body, _ = json.Marshal(map[string]any{
		"action": "train.create", "booking_id": scenario.Booking, "idempotency_key": key,
		"manifest": base64.StdEncoding.EncodeToString(m.Raw), "manifest_signature": m.Signature,
		"entitlement_token": ent, "confirmation_ref": ref,
	})
	return body, ref, key
}

// nothingWritten fails unless ref is unconsumed and nothing is stored under key.
func nothingWritten(t *testing.T, h *harness, ref, key string) {
	t.Helper()
	ctx := context.Background()
	if c, err := h.store.Confirmation(ctx, ref); err != nil || c.State != ledger.ConfirmationAvailable {
		t.Errorf("confirmation %+v, %v; want it available", c, err)
	}
	if _, err := h.store.Admission(ctx, scenario.Account, key); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("an admission is stored under %s: %v", key, err)
	}
}

func violationCodes(env map[string]any) []string {
	errBody, _ := env["error"].(map[string]any)
	raw, _ := errBody["violations"].([]any)
	var codes []string
	for _, v := range raw {
		f, _ := v.(map[string]any)
		codes = append(codes, fmt.Sprint(f["code"]))
	}
	return codes
}

// TestTelemetryOverHTTP: the entitlement's signed telemetry moves the
// checkpoint model and the price, and a decision with it; absent, bundle
// data decides; malformed or stale, a coded deny that consumes nothing.
// Every allow reports the expected goodput and where the failure rate came
// from. llama3-8b: 64 GPUs × 6 h, confirmed at its 2000.00 ceiling.
func TestTelemetryOverHTTP(t *testing.T) {
	h := newHarness(t, nil)
	for _, tc := range []struct {
		name  string
		tweak func(map[string]any)
		codes []string // nil: allowed
		est   map[string]any
	}{
		// 64 × 6306.44 s / 3600 / 50676 GPU-hours: 0.22 % lost
		{"no telemetry: bundle data", nil, nil, map[string]any{
			"expected_goodput": 0.9978, "checkpoint_failure_rate_source": "bundle",
			"lost_gpu_hours": "0.85", "lost_work_cost_usd": "2.12", "compute_cost_usd": "958.28", "total_cost_usd": "963.80",
		}},
		// 0.0001 per GPU-hour: 1.12 % lost, 38400 × 0.011212 → 4.31 GPU-hours × 2.49 = 10.7319 → 10.74
		{"telemetry: a measured failure rate", telemetry(0.0001, 10*time.Minute), nil, map[string]any{
			"expected_goodput": 0.9888, "checkpoint_failure_rate_source": "telemetry",
			"lost_gpu_hours": "4.31", "lost_work_cost_usd": "10.74", "compute_cost_usd": "966.90", "total_cost_usd": "972.42",
		}},
		// 0.001 per GPU-hour: 11.21 % lost, above the 10 % the bundle data (0.22 %) keeps far below
		{"telemetry: the failure rate flips the decision", telemetry(0.001, 10*time.Minute),
			[]string{"CHECKPOINT_LOST_WORK_HIGH"}, nil},
		{"telemetry: out of bounds", telemetry(0, 10*time.Minute), []string{"ENTITLEMENT_TELEMETRY_MALFORMED"}, nil},
		{"telemetry: not a number", telemetry("0.0001", 10*time.Minute), []string{"ENTITLEMENT_TELEMETRY_MALFORMED"}, nil},
		{"telemetry: measured a day and a second ago", telemetry(0.0001, 24*time.Hour+time.Second),
			[]string{"ENTITLEMENT_TELEMETRY_STALE"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, ref, key := telemetryRequest(t, h, "llama3-8b", "2000.00", tc.tweak)
			status, env := post(t, h, "/v1/admissions", "application/json", callerToken(t, h), body)
			if tc.codes != nil {
				if got := violationCodes(env); status != http.StatusForbidden || fmt.Sprint(got) != fmt.Sprint(tc.codes) {
					t.Fatalf("status %d violations %v, want 403 %v", status, got, tc.codes)
				}
				nothingWritten(t, h, ref, key)
				return
			}
			if status != http.StatusOK {
				t.Fatalf("status %d, want 200: %v", status, env["error"])
			}
			est := estimatesOf(t, env)
			for k, want := range tc.est {
				if got := est[k]; got != want {
					t.Errorf("estimates.%s = %v, want %v", k, got, want)
				}
			}
		})
	}
}

// TestPlanGoodputFromTelemetry: POST /v1/plans reports each plan's goodput
// by the same checkpoint model as the gate: with the booking's telemetry,
// from its failure rate.
func TestPlanGoodputFromTelemetry(t *testing.T) {
	h := newHarness(t, nil)
	m, err := h.runner.LoadManifest("llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	token, err := h.runner.CallerToken()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		tweak  func(map[string]any)
		source string
	}{
		{"bundle data", nil, "bundle"},
		{"telemetry", telemetry(0.0001, time.Minute), "telemetry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := postPlan(t, h, m, token, tc.tweak)
			if len(res.Plans) == 0 || len(res.Refusals) != 0 {
				t.Fatalf("POST /v1/plans: %d plans, refusals %+v; want plans and no refusal", len(res.Plans), res.Refusals)
			}
			env := api.Envelope[policy.PlanResult]{Data: res}
			for _, p := range env.Data.Plans {
				e := p.Estimates
				if e.FailureRateSource != tc.source || e.Goodput == nil || e.LostFraction == nil ||
					math.Abs(*e.Goodput+*e.LostFraction-1) > 0.0001 {
					t.Errorf("plan %d: source %q goodput %v lost %v; want %s, goodput = 1 − lost",
						p.Rank, e.FailureRateSource, e.Goodput, e.LostFraction, tc.source)
				}
			}
		})
	}
}

// TestPlanSaysWhyNothingIsAdmitted: an entitlement whose telemetry is
// malformed refuses every proposal whatever its layout; the answer has no
// plan and names the refusal (one finding per code, no confirmation
// finding), so the caller is not left with an empty list and a budget.
func TestPlanSaysWhyNothingIsAdmitted(t *testing.T) {
	h := newHarness(t, nil)
	m, err := h.runner.LoadManifest("llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	token, err := h.runner.CallerToken()
	if err != nil {
		t.Fatal(err)
	}
	res := postPlan(t, h, m, token, telemetry(0.5, time.Minute)) // above the bounds' 0.01 per GPU-hour
	if len(res.Plans) != 0 || len(res.Refusals) != 1 ||
		res.Refusals[0].Code != "ENTITLEMENT_TELEMETRY_MALFORMED" || res.Refusals[0].Gate != "entitlement" {
		t.Fatalf("plans %d, refusals %+v; want none and exactly ENTITLEMENT_TELEMETRY_MALFORMED", len(res.Plans), res.Refusals)
	}
}

// postPlan asks POST /v1/plans for m on the demo booking, its entitlement's
// claims changed by tweak, and returns the answer's data (200 or the test
// fails).
func postPlan(t *testing.T, h *harness, m scenario.Manifest, token string, tweak func(map[string]any)) policy.PlanResult {
	t.Helper()
	ent, err := h.runner.EntitlementFor(m, tweak)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(api.PlanRequest{BookingID: scenario.Booking, Manifest: m.Raw,
		ManifestSignature: m.Signature, EntitlementToken: ent})
	status, raw := post(t, h, "/v1/plans", "application/json", token, body)
	b, _ := json.Marshal(raw)
	var env api.Envelope[policy.PlanResult]
	if err := json.Unmarshal(b, &env); err != nil || status != http.StatusOK {
		t.Fatalf("POST /v1/plans = %d %v %v", status, raw["error"], err)
	}
	return env.Data
}

// permissive is a bundle that allows everything and estimates nothing; its
// training facts are still computed, in Go, from its data.
type permissive struct{ d admission.Decider }

func (p permissive) Decide(context.Context, map[string]any) (policy.Decision, error) {
	return policy.Decision{Allow: true}, nil
}
func (p permissive) Revision() string         { return p.d.Revision() }
func (p permissive) Facts() *trainfacts.Model { return admission.FactsOf(p.d) }

// TestLostWorkIsPricedOverHTTP: the Megatron fixture's compute is 8 GPUs ×
// 6 h × 2.49 = 119.52 plus its expected lost work (0.03 GPU-hours × 2.49 =
// 0.0747 → 0.08): 119.60; with 2.42 storage the policy's total is 122.02.
// The ledger's re-check at commit prices the same lost work behind a bundle
// that allows everything and estimates nothing: a confirmation that covers
// the booked compute but not the lost work is refused by both, writing
// nothing; the ledger's floor has no storage, so only the policy refuses
// what covers the compute but not the storage.
func TestLostWorkIsPricedOverHTTP(t *testing.T) {
	below := "CONFIRMATION_COST_BELOW_ESTIMATE"
	strict := newHarness(t, nil)
	loose := newHarness(t, func(o *admission.Options) {
		active := o.Policy
		o.Policy = func() admission.Decider {
			if d := active(); d != nil {
				return permissive{d}
			}
			return nil
		}
	})
	for _, tc := range []struct {
		cost                string
		policy, ledgerCheck string // the code refusing it, "" when admitted
	}{
		{"119.52", below, below}, // the booked compute alone
		{"119.59", below, below},
		{"119.60", below, ""}, // compute with the lost work, no storage
		{"121.94", below, ""}, // everything but the lost work
		{"122.02", "", ""},
	} {
		for _, side := range []struct {
			name string
			h    *harness
			code string
		}{{"policy", strict, tc.policy}, {"ledger re-check", loose, tc.ledgerCheck}} {
			t.Run(tc.cost+" "+side.name, func(t *testing.T) {
				body, ref, key := telemetryRequest(t, side.h, "megatron-llama3-8b-h100-fp8", tc.cost, nil)
				status, env := post(t, side.h, "/v1/admissions", "application/json", callerToken(t, side.h), body)
				errBody, _ := env["error"].(map[string]any)
				if side.code != "" {
					if status != http.StatusForbidden || errBody["code"] != side.code {
						t.Fatalf("status %d %v, want 403 %s", status, errBody, side.code)
					}
					nothingWritten(t, side.h, ref, key)
					return
				}
				if status != http.StatusOK {
					t.Fatalf("status %d %v, want 200", status, errBody)
				}
				a, err := side.h.store.Admission(context.Background(), scenario.Account, key)
				want := map[string]int64{"policy": 122_020_000, "ledger re-check": 119_600_000}[side.name]
				if err != nil || a.CostMicroUSD != want {
					t.Errorf("stored cost %d µUSD, %v; want %d", a.CostMicroUSD, err, want)
				}
			})
		}
	}
}
