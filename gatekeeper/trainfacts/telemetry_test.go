package trainfacts_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/policies"
)

// baseDoc is the Rego tests' base input (llama3-8b: 64 GPUs, 6 h, a
// checkpoint every 500 of 1000 steps to S3; now 1764403200, iat
// 1764403100) with numbers as json.Number.
func baseDoc(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile("../../policies/ito/testdata/base/data.json")
	if err != nil {
		t.Fatal(err)
	}
	var data struct {
		Input map[string]any `json:"input"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&data); err != nil {
		t.Fatal(err)
	}
	return data.Input
}

// TestTelemetryMovesTheCheckpointModel: the entitlement's telemetry claim,
// used, replaces the bundle's failure rate and the named tier's write
// bandwidth, which moves the lost work, the goodput and the price; absent,
// malformed or stale, the model stays on bundle data and says why.
func TestTelemetryMovesTheCheckpointModel(t *testing.T) {
	b, _, err := policy.ReadFS(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	m, err := trainfacts.New(b.Data)
	if err != nil {
		t.Fatal(err)
	}
	claim := func(fields map[string]any) map[string]any {
		c := map[string]any{"measured_at": json.Number("1764403000"), "window_seconds": json.Number("604800")}
		for k, v := range fields {
			c[k] = v
		}
		return c
	}
	for _, tc := range []struct {
		name                                  string
		telemetry                             any // absent when nil
		status, rateSource, gpuHours, goodput string
		writeSource, writeSeconds, lostCenti  string
	}{
		{"absent", nil, "none", "bundle", "50676", "0.9978", "bundle", "6.44", "85"},
		// 1 / 0.001 in OPA's 64-bit float is 1000.00000000000000006 (the reference's too);
		// 64 × 6306.44 s / 3600 / that = 0.112115; 38400 centi-GPU-hours × that = 4305.2 → 4306
		{"a failure rate", claim(map[string]any{"interruptions_per_gpu_hour": json.Number("0.001")}),
			"used", "telemetry", "1000.00000000000000006", "0.8879", "bundle", "6.44", "4306"},
		// 128.85 GB at 8 nodes × 0.1 GB/s
		{"a write bandwidth", claim(map[string]any{"checkpoint_write_gbytes_per_s_per_node": map[string]any{
			"s3-standard": json.Number("0.1")}}), "used", "bundle", "50676", "0.9978", "telemetry", "161.06", "85"},
		{"out of bounds", claim(map[string]any{"interruptions_per_gpu_hour": json.Number("0.5")}),
			"malformed", "bundle", "50676", "0.9978", "bundle", "6.44", "85"},
		{"a day and a second old", claim(map[string]any{"interruptions_per_gpu_hour": json.Number("0.001"),
			"measured_at": json.Number("1764316799")}), "stale", "bundle", "50676", "0.9978", "bundle", "6.44", "85"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := baseDoc(t)
			if tc.telemetry != nil {
				doc["entitlement"].(map[string]any)["telemetry"] = tc.telemetry
			}
			facts, err := m.Compute(doc)
			if err != nil {
				t.Fatal(err)
			}
			ckpt := facts["checkpoint"].(map[string]any)
			rounded := ckpt["rounded"].(map[string]any)
			budget := facts["budget"].(map[string]any)
			for k, want := range map[string]any{
				"telemetry": tc.status, "failure_rate_source": tc.rateSource,
				"gpu_hours_between_failures": tc.gpuHours, "goodput (rounded)": tc.goodput,
				"write_bandwidth_source": tc.writeSource, "write_seconds (rounded)": tc.writeSeconds,
				"lost_centi_gpu_hours": tc.lostCenti,
			} {
				var got any
				switch k {
				case "goodput (rounded)":
					got = rounded["goodput"]
				case "write_seconds (rounded)":
					got = rounded["write_seconds"]
				case "lost_centi_gpu_hours":
					got = budget[k]
				default:
					got = ckpt[k]
				}
				if s, _ := got.(json.Number); string(s) != want && got != want {
					t.Errorf("%s = %v, want %v", k, got, want)
				}
			}
			if n, ok := trainfacts.LostCentiGPUHours(map[string]any{"facts": facts}); !ok || jsonInt(n) != tc.lostCenti {
				t.Errorf("LostCentiGPUHours = %d, %v; want %s", n, ok, tc.lostCenti)
			}
		})
	}
	if _, ok := trainfacts.LostCentiGPUHours(map[string]any{}); ok {
		t.Error("LostCentiGPUHours of a document without facts is defined")
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }
