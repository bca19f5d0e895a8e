package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "manifests", name))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestEveryFixtureManifestIsSchemaValid(t *testing.T) {
	t.Parallel()
	paths, _ := filepath.Glob(filepath.Join("..", "..", "fixtures", "manifests", "*.json"))
	if len(paths) == 0 {
		t.Fatal("no fixture manifests")
	}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(raw); err != nil {
			t.Errorf("%s: %v", filepath.Base(p), err)
		}
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	good := fixture(t, "llama3-8b.json")
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	cases := []struct {
		name string
		raw  []byte
		code api.Code
		msg  string
	}{
		{"unknown top-level field", edit(func(m map[string]any) { m["allow"] = true }), api.CodeManifestSchemaInvalid, `/: unknown field "allow"`},
		{"unknown nested field", edit(func(m map[string]any) { m["model"].(map[string]any)["revison"] = "x" }), api.CodeManifestSchemaInvalid, `/model: unknown field "revison"`},
		{"missing required", edit(func(m map[string]any) { delete(m, "budget") }), api.CodeManifestSchemaInvalid, `/: missing "budget"`},
		{"wrong type", edit(func(m map[string]any) { m["hardware"].(map[string]any)["nodes"] = "8" }), api.CodeManifestSchemaInvalid, "/hardware/nodes: want integer"},
		{"bad enum", edit(func(m map[string]any) { m["parallelism"].(map[string]any)["precision"] = "fp64" }), api.CodeManifestSchemaInvalid, "/parallelism/precision"},
		{"wrong schema id", edit(func(m map[string]any) { m["schema"] = "ito.training/v2" }), api.CodeManifestSchemaInvalid, "/schema"},
		{"duplicate key", append([]byte(`{"schema":"ito.training/v1","schema":"x",`), good[1:]...), api.CodeManifestMalformed, "duplicate key"},
		{"not json", []byte("schema: ito.training/v1"), api.CodeManifestMalformed, "syntax error"},
		{"too large", bytes.Repeat([]byte(" "), MaxBytes+1), api.CodeManifestTooLarge, "larger than"},
		{"too many datasets", edit(func(m map[string]any) {
			d := m["data"].([]any)
			for len(d) <= 64 {
				d = append(d, d[0])
			}
			m["data"] = d
		}), api.CodeManifestLimitExceeded, `/data: fails "maxItems"`},
		{"dataset uri too long", edit(func(m map[string]any) {
			m["data"].([]any)[0].(map[string]any)["uri"] = "s3://b/" + strings.Repeat("x", 512)
		}), api.CodeManifestLimitExceeded, `/data/0/uri: fails "maxLength"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tc.raw)
			var me *Error
			if !errors.As(err, &me) || me.Code != tc.code || !strings.Contains(me.Message, tc.msg) {
				t.Fatalf("Parse = %v; want %s containing %q", err, tc.code, tc.msg)
			}
		})
	}
}

func TestSchemaErrorsNeverEchoValues(t *testing.T) {
	t.Parallel()
	secret := "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"
	var m map[string]any
	_ = json.Unmarshal(fixture(t, "llama3-8b.json"), &m)
	m["parallelism"].(map[string]any)["precision"] = secret
	m["objective"].(map[string]any)["stage"] = secret
	m["model"].(map[string]any)["AKIAIOSFODNN7EXAMPLE"] = "x"
	raw, _ := json.Marshal(m)
	_, err := Parse(raw)
	if err == nil || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "AKIA") {
		t.Fatalf("error %v must name paths, not values or secret-shaped keys", err)
	}
	if !strings.Contains(err.Error(), "/model: unknown field (a name not shown)") {
		t.Fatalf("error %v should still say where", err)
	}
}

func TestDigestIsOverExactBytes(t *testing.T) {
	t.Parallel()
	a := Digest([]byte(`{"a":1}`))
	b := Digest([]byte(`{"a": 1}`))
	if a == b || !strings.HasPrefix(a, "sha256:") || len(a) != len("sha256:")+64 {
		t.Fatalf("digests %s %s", a, b)
	}
}
