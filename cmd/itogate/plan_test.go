package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/internal/patience"
)

// The evaluations here get patience.Deadline, not the server's 250 ms:
// what they test is the plans, on a machine of any speed and load.

// TestPlanThenEval: `itogate plan --json` on a published recipe (the
// Llama 3 70B torchtitan fixture, replanned on 4 nodes) prints ranked
// plans, and every proposed manifest, written to a file, is admitted by
// `itogate eval` (exit 0) with the same estimates of memory.
func TestPlanThenEval(t *testing.T) {
	const now = "1764403200"
	res := runCLI(t, "plan", "--manifest", "../../fixtures/manifests/llama3-70b.json", "--nodes", "4", "--now", now, "--json",
		"--deadline", patience.Deadline.String())
	if res.exit != 0 {
		t.Fatalf("plan: exit %d\n%s%s", res.exit, res.stdout, res.stderr)
	}
	var out struct {
		Plans []struct {
			Rank      int `json:"rank"`
			Estimates struct {
				WorldSize int     `json:"world_size"`
				MemoryGB  float64 `json:"memory_gb_per_gpu"`
			} `json:"estimates"`
			Manifest map[string]any `json:"manifest"`
		} `json:"plans"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Plans) < 3 {
		t.Fatalf("%d plans, want at least 3", len(out.Plans))
	}
	dir := t.TempDir()
	for _, p := range out.Plans {
		if p.Estimates.WorldSize != 32 {
			t.Errorf("plan %d on %d GPUs, want the 4 nodes asked for", p.Rank, p.Estimates.WorldSize)
		}
		raw, err := json.Marshal(p.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "plan.json")
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		ev := runCLI(t, "eval", "--manifest", path, "--now", now, "--json", "--deadline", patience.Deadline.String())
		if ev.exit != 0 {
			t.Errorf("plan %d: eval exit %d\n%s", p.Rank, ev.exit, ev.stdout)
			continue
		}
		var d struct {
			Decision struct {
				Estimates map[string]any `json:"estimates"`
			} `json:"decision"`
		}
		if err := json.Unmarshal([]byte(ev.stdout), &d); err != nil {
			t.Fatal(err)
		}
		if got := d.Decision.Estimates["memory_gb_per_gpu"]; got != p.Estimates.MemoryGB {
			t.Errorf("plan %d: eval estimates %v GB per GPU, the plan %v", p.Rank, got, p.Estimates.MemoryGB)
		}
	}
}

// TestPlanBadInput: a negative node count is bad input (exit 4), and a
// booking no layout fits is exit 2.
func TestPlanBadInput(t *testing.T) {
	if res := runCLI(t, "plan", "--manifest", "../../fixtures/manifests/llama3-8b.json", "--nodes", "-1"); res.exit != exitFailed {
		t.Errorf("--nodes -1: exit %d, want %d\n%s", res.exit, exitFailed, res.stderr)
	}
	// 405B on one node: no layout holds its states there, nor on the few
	// node counts probed above the least that could
	res := runCLI(t, "plan", "--manifest", "../../fixtures/manifests/llama3-405b.json", "--nodes", "1", "--json",
		"--deadline", patience.Deadline.String())
	if res.exit != exitDenied {
		t.Errorf("405B on one node: exit %d, want %d\n%s", res.exit, exitDenied, res.stdout)
	}
}

// planNowUnix pins the clock of the entitlement tests: the claims' iat
// and the telemetry's measured_at are relative to it.
const planNowUnix = 1764403200

// planClaimsFile writes the default offline entitlement of the llama3-8b
// fixture (scenario.ExactEntitlementClaims at planNowUnix, the claims
// `itogate plan` uses without --entitlement) with telemetry as its
// telemetry claim (none when nil) to a 0600 file and returns its path.
func planClaimsFile(t *testing.T, telemetry map[string]any) string {
	t.Helper()
	doc, err := manifest.Parse(mustRead(t, filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json")))
	if err != nil {
		t.Fatal(err)
	}
	claims := scenario.ExactEntitlementClaims(doc, time.Unix(planNowUnix, 0))
	if telemetry != nil {
		claims["telemetry"] = telemetry
	}
	raw, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "entitlement.json")
	writeMode(t, path, raw, 0o600)
	return path
}

// planTelemetry is a telemetry claim measured age seconds before
// planNowUnix over a week, rate interruptions per GPU-hour.
func planTelemetry(rate any, age int64) map[string]any {
	return map[string]any{"measured_at": planNowUnix - age, "window_seconds": 604800, "interruptions_per_gpu_hour": rate}
}

type planJSON struct {
	Plans []struct {
		Rank      int `json:"rank"`
		Estimates struct {
			GPUHours     float64 `json:"gpu_hours"`
			USD          float64 `json:"usd"`
			Goodput      float64 `json:"goodput"`
			LostFraction float64 `json:"expected_lost_fraction"`
			Source       string  `json:"failure_rate_source"`
		} `json:"estimates"`
	} `json:"plans"`
	EntitlementViolations []struct {
		Code string `json:"code"`
		Gate string `json:"gate"`
	} `json:"entitlement_violations"`
	Refusals []struct {
		Code string `json:"code"`
	} `json:"refusals"`
}

func runPlanJSON(t *testing.T, args ...string) (cliResult, planJSON) {
	t.Helper()
	args = append([]string{"plan", "--manifest", filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"),
		"--now", fmt.Sprint(planNowUnix), "--json", "--deadline", patience.Deadline.String()}, args...)
	res := runCLI(t, args...)
	var out planJSON
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatalf("plan: exit %d, not JSON: %v\n%s%s", res.exit, err, res.stdout, res.stderr)
	}
	return res, out
}

// TestPlanGoodputFromEntitlementTelemetry: `itogate plan --entitlement`
// prices and reports goodput from the entitlement's telemetry as POST
// /v1/plans does. llama3-8b on its 64 A100s: every plan loses 6306.44 s
// per failure (a checkpoint every 10800 s); bundle data gives 50676
// GPU-hours between failures (64 × 6306.44 / 3600 / 50676: 0.22 % lost,
// goodput 0.9978); the telemetry's 0.0005 interruptions per GPU-hour give
// 2000 (5.61 % lost, goodput 0.9439, still under the gate's 10 %). The
// first plan's 58.23 GPU-hours at 2.49 USD: 145.31 USD with the bundle's
// lost work, 153.12 with the measured one. Without --entitlement, and with
// the same claims and no telemetry, the plans are the bundle's.
func TestPlanGoodputFromEntitlementTelemetry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		source  string
		goodput float64
		lost    float64
		usd     float64 // the first plan's
	}{
		{"no --entitlement", nil, "bundle", 0.9978, 0.0022, 145.31},
		{"claims without telemetry", []string{"--entitlement", planClaimsFile(t, nil)}, "bundle", 0.9978, 0.0022, 145.31},
		{"telemetry: 0.0005 interruptions per GPU-hour", []string{"--entitlement", planClaimsFile(t, planTelemetry(0.0005, 600))},
			"telemetry", 0.9439, 0.0561, 153.12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, out := runPlanJSON(t, tc.args...)
			if res.exit != 0 || len(out.Plans) != 5 || out.EntitlementViolations != nil {
				t.Fatalf("exit %d, %d plans, entitlement violations %v; want 0, 5, none\n%s", res.exit, len(out.Plans),
					out.EntitlementViolations, res.stderr)
			}
			for _, p := range out.Plans {
				e := p.Estimates
				if e.Source != tc.source || e.Goodput != tc.goodput || e.LostFraction != tc.lost {
					t.Errorf("plan %d: source %q goodput %v lost %v; want %s, %v, %v", p.Rank, e.Source, e.Goodput,
						e.LostFraction, tc.source, tc.goodput, tc.lost)
				}
			}
			if e := out.Plans[0].Estimates; e.GPUHours != 58.23 || e.USD != tc.usd {
				t.Errorf("plan 1: %v GPU-hours, %v USD; want 58.23, %v", e.GPUHours, e.USD, tc.usd)
			}
		})
	}
	// The text output names the source.
	res := runCLI(t, "plan", "--manifest", filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"),
		"--now", fmt.Sprint(planNowUnix), "--deadline", patience.Deadline.String(),
		"--entitlement", planClaimsFile(t, planTelemetry(0.0005, 600)))
	if want := "failure rate (goodput, lost work in USD) from: telemetry\n"; res.exit != 0 || !strings.Contains(res.stdout, want) {
		t.Errorf("text: exit %d, want %q in\n%s", res.exit, want, res.stdout)
	}
}

// TestPlanEntitlementTelemetryRefused: telemetry that is malformed (a rate
// of 0, under the bounds; a rate as a string) or stale (measured a day
// and a second ago) admits no plan (exit 2, no plans) and the plan names
// the code `itogate eval --entitlement` denies the same manifest with,
// exit 2 too.
func TestPlanEntitlementTelemetryRefused(t *testing.T) {
	for _, tc := range []struct {
		name      string
		telemetry map[string]any
		code      string
	}{
		{"rate under the bounds", planTelemetry(0, 600), "ENTITLEMENT_TELEMETRY_MALFORMED"},
		{"rate not a number", planTelemetry("0.0005", 600), "ENTITLEMENT_TELEMETRY_MALFORMED"},
		{"measured a day and a second ago", planTelemetry(0.0005, 86401), "ENTITLEMENT_TELEMETRY_STALE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims := planClaimsFile(t, tc.telemetry)
			res, out := runPlanJSON(t, "--entitlement", claims)
			if res.exit != exitDenied || len(out.Plans) != 0 || len(out.EntitlementViolations) != 1 ||
				out.EntitlementViolations[0].Code != tc.code || out.EntitlementViolations[0].Gate != "entitlement" {
				t.Fatalf("plan: exit %d, %d plans, entitlement violations %+v; want %d, none, [%s]",
					res.exit, len(out.Plans), out.EntitlementViolations, exitDenied, tc.code)
			}
			// Every proposal was refused for the same reason, and the answer says so.
			if len(out.Refusals) != 1 || out.Refusals[0].Code != tc.code {
				t.Fatalf("plan: refusals %+v; want [%s]", out.Refusals, tc.code)
			}
			text := runCLI(t, "plan", "--manifest", filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"),
				"--now", fmt.Sprint(planNowUnix), "--deadline", patience.Deadline.String(), "--entitlement", claims)
			if text.exit != exitDenied || !strings.Contains(text.stdout, "REFUSED  "+tc.code) ||
				strings.Contains(text.stdout, "these are the best plans found before it") {
				t.Fatalf("plan (text): exit %d\n%s", text.exit, text.stdout)
			}
			ev := runCLI(t, "eval", "--manifest", filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"),
				"--now", fmt.Sprint(planNowUnix), "--json", "--deadline", patience.Deadline.String(), "--entitlement", claims)
			var d struct {
				Decision struct {
					Violations []struct {
						Code string `json:"code"`
					} `json:"violations"`
				} `json:"decision"`
			}
			if err := json.Unmarshal([]byte(ev.stdout), &d); err != nil {
				t.Fatal(err)
			}
			if v := d.Decision.Violations; ev.exit != exitDenied || len(v) != 1 || v[0].Code != tc.code {
				t.Fatalf("eval: exit %d, violations %+v; want %d, [%s]", ev.exit, v, exitDenied, tc.code)
			}
		})
	}
}
