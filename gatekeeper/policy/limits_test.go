package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/policies"
	"github.com/itocompute/itogate/schemas"
)

// Manifests at the schema's limits: the most datasets and eval gates it
// accepts, every string at its longest. The policy's cost grows with them
// (one scan of the strings, a few rules per dataset), and docs/performance.md
// compares it with llama3-8b's (BenchmarkDecideCPU/limits-*).
//
//   - limits-allow: every dataset valid, in the cluster's region;
//   - limits-deny: every dataset violates every data rule it can (license,
//     region, decontamination suite), and every URI carries "?sig=", which
//     passes the credential prefilter without matching a pattern, so the data
//     gate also runs its full per-path scan.
var limitsKinds = []string{"limits-allow", "limits-deny"}

// pad returns s grown to exactly n bytes with filler from the plain path
// alphabet (no credential shape).
func pad(s string, n int) string {
	if len(s) >= n {
		return s[:n]
	}
	return s + strings.Repeat("x", n-len(s))
}

// schemaLimit reads a maxItems or maxLength from the manifest schema, so the
// generated manifests follow the schema when its bounds change.
func schemaLimit(tb testing.TB, keyword string, path ...string) int {
	tb.Helper()
	var node any
	if err := json.Unmarshal(schemas.Manifest(), &node); err != nil {
		tb.Fatal(err)
	}
	for _, p := range path {
		node = node.(map[string]any)[p]
		if ref, ok := node.(map[string]any)["$ref"].(string); ok {
			var root map[string]any
			_ = json.Unmarshal(schemas.Manifest(), &root)
			node = root["$defs"].(map[string]any)[strings.TrimPrefix(ref, "#/$defs/")]
		}
	}
	n, ok := node.(map[string]any)[keyword].(float64)
	if !ok {
		tb.Fatalf("schema: no %s at %v", keyword, path)
	}
	return int(n)
}

func limitsManifest(tb testing.TB, kind string) []byte {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		tb.Fatal(err)
	}
	length := func(path ...string) int {
		return schemaLimit(tb, "maxLength", append([]string{"properties"}, path...)...)
	}
	dataItem := []string{"data", "items", "properties"}
	decon := append(append([]string{}, dataItem...), "decontamination", "properties")
	gateItem := []string{"eval_gates", "items", "properties"}
	deny := kind == "limits-deny"
	m["name"] = pad("llama3-8b-at-the-schema-limits-", length("name"))
	m["source"] = pad("torchtitan torchtitan/models/llama3/train_configs/", length("source"))
	data := make([]any, schemaLimit(tb, "maxItems", "properties", "data"))
	for i := range data {
		uri := fmt.Sprintf("s3://ito-datasets/shard-%03d/", i)
		license, region, suite, version := "odc-by-1.0", "us-east-1", "ito-evals", "2026.10"
		if deny {
			uri = fmt.Sprintf("https://ito-datasets.example/shard-%03d/data.jsonl?sig=", i)
			license = pad("unknown-license-", length(append(dataItem, "license")...))
			region = pad("eu-remote-", length(append(dataItem, "region")...))
			suite = pad("another-suite-", length(append(decon, "eval_suite")...))
			version = pad("2025.", length(append(decon, "eval_suite_version")...))
		}
		data[i] = map[string]any{
			"uri": pad(uri, length(append(dataItem, "uri")...)), "license": license, "tokens": 1000000000,
			"region": region, "pii": false,
			"decontamination": map[string]any{
				"eval_suite": suite, "eval_suite_version": version,
				"method":        pad("13-gram-overlap-", length(append(decon, "method")...)),
				"report_digest": "sha256:" + strings.Repeat("5f", 32),
			},
			// These shards are not on the bundle's approved catalog: custom
			// data carries its own dedup provenance (ito.datachecks).
			"dedup": map[string]any{"method": "minhash-lsh", "ratio": 0.05,
				"report_digest": "sha256:" + strings.Repeat("6d", 32)},
		}
	}
	m["data"] = data
	gates := make([]any, schemaLimit(tb, "maxItems", "properties", "eval_gates"))
	for i := range gates {
		gates[i] = map[string]any{"stage": "pretrain",
			"suite":  pad(fmt.Sprintf("ito-evals-%02d-", i), length(append(gateItem, "suite")...)),
			"metric": pad(fmt.Sprintf("metric-%02d-", i), length(append(gateItem, "metric")...)), "min": 0.25}
	}
	m["eval_gates"] = gates
	ckpt := m["checkpoint"].(map[string]any)
	ckpt["storage_uri"] = pad("s3://ito-checkpoints/llama3-8b/", length("checkpoint", "properties", "storage_uri"))
	out, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

func limitsInput(tb testing.TB, kind string) map[string]any {
	tb.Helper()
	raw := limitsManifest(tb, kind)
	doc, err := manifest.Parse(raw)
	if err != nil {
		tb.Fatalf("%s is not schema-valid: %v", kind, err)
	}
	return scenario.OfflineInput(raw, doc, nil, nil, time.Unix(1764403200, 0), nil)
}

// TestLimitsManifestsAreDecided: the largest manifests the schema accepts are
// within manifest.MaxBytes and decided (never an evaluation error), with the
// codes their content calls for. No time is asserted here: their cost is a
// benchmark figure.
func TestLimitsManifestsAreDecided(t *testing.T) {
	e, err := policy.New(context.Background(), policy.Options{Bundle: policies.Bundle(), Deadline: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"limits-allow": nil,
		"limits-deny":  {"DATA_DECONTAMINATION_STALE", "DATA_LICENSE_NOT_ALLOWED"},
	}
	for _, kind := range limitsKinds {
		if n := len(limitsManifest(t, kind)); n > manifest.MaxBytes {
			t.Fatalf("%s: %d bytes, above manifest.MaxBytes", kind, n)
		}
		d, err := e.Decide(context.Background(), admission.WithFacts(limitsInput(t, kind), e.Facts()))
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		var codes []string
		seen := map[string]int{}
		for _, v := range d.Violations {
			if seen[string(v.Code)] == 0 {
				codes = append(codes, string(v.Code))
			}
			seen[string(v.Code)]++
		}
		if fmt.Sprint(codes) != fmt.Sprint(want[kind]) {
			t.Errorf("%s: violations %v, want %v", kind, codes, want[kind])
		}
		if kind == "limits-deny" {
			for _, c := range want[kind] {
				if n := schemaLimit(t, "maxItems", "properties", "data"); seen[c] != n {
					t.Errorf("%s: %d %s violations, want one per dataset (%d)", kind, seen[c], c, n)
				}
			}
		}
	}
}
