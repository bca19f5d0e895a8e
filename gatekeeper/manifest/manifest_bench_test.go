package manifest_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/manifest"
)

// BenchmarkParse is the schema validation of one admission's manifest.
func BenchmarkParse(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := manifest.Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDigest is the manifest digest taken on every train.create.
func BenchmarkDigest(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		_ = manifest.Digest(raw)
	}
}
