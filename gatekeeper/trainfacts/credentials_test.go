package trainfacts

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/itocompute/itogate/policies"
)

func embeddedModel(tb testing.TB) *Model {
	tb.Helper()
	loader, err := bundle.NewFSLoader(policies.Bundle())
	if err != nil {
		tb.Fatal(err)
	}
	b, err := bundle.NewCustomReader(loader).WithRegoVersion(ast.RegoV1).Read()
	if err != nil {
		tb.Fatal(err)
	}
	m, err := New(b.Data)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// credentialSamples are strings each credential pattern matches, written in
// every case and with the runes (?i) folds onto ASCII letters (the long s,
// the Kelvin sign), and near misses.
var credentialSamples = []string{
	"AKIAIOSFODNN7EXAMPLE", "aws ASIAABCDEFGHIJKLMNOP key", "-----BEGIN RSA PRIVATE KEY-----",
	"Bearer abcdefghijklmnopqrstuvwxyz012345", "BEARER abcdefghijklmnopqrstuvwxyz012345", "ſ bearer abcdefghijklmnopqrstuvwxyz",
	"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
	"github_pat_0123456789abcdefghijklmnop", "hf_0123456789abcdefghijklmnopqrstuvwxyzAB", "xoxb-0123456789-abcdef",
	"glpat-0123456789abcdefghij", "sk-abcT3BlbkFJxyz", "AIzaSyA0123456789abcdefghijklmnopqrstuv",
	"https://b.s3.amazonaws.com/x?X-Amz-Signature=abc", "https://b/x?x-amz-credential=abc", "https://b/x?X-Goog-Signature=1",
	"https://b/x?AWSAccessKeyId=1&Signature=2", "https://b.example/x?sig=abc&se=2026", "https://b.example/x?ſig=abc&ſe=2026",
	"https://b.example/x?SIG=abc&SE=2026", "https://user:pass@example.com/x", "https://user%3Apass@example.com/x",
	"https://abcdefghijklmnopqrstuvwxyz@example.com/x", "sk_live_0123456789abcdefghijkl", "sk-ant-0123456789abcdefghijkl",
	"data:text/plain;base64,SGVsbG8=", "DATA:x;BASE64,", "ſk-ant-0123456789abcdefghijkl", "s3://bucket/plain/", "us-east-1",
	"password", "api_key", "client-secret", "X_ACCESS_TOKEN", "credentials", "ſecret", "a.token", "tokenizer", "note",
}

// everyPattern is the kinds of the patterns s matches, every pattern run
// (what the keyword prefilter must not change).
func everyPattern(cc *credentialConfig, s string) []string {
	var out []string
	for _, p := range cc.patterns {
		if !slices.ContainsFunc(p.all, func(re *regexp.Regexp) bool { return !re.MatchString(s) }) && !slices.Contains(out, p.kind) {
			out = append(out, p.kind)
		}
	}
	return out
}

// sampleRunes are the runes mutations insert: the samples' own, the long s
// and the Kelvin sign, URL punctuation and a newline.
var sampleRunes = []rune(strings.Join(credentialSamples, "") + "ſKK:/@?&=_-. \n")

// mutateSample is s after up to edits random edits (a rune replaced,
// deleted or inserted), stopping when s is empty.
func mutateSample(rng *rand.Rand, s string, edits int) string {
	r := []rune(s)
	for range edits {
		if len(r) == 0 {
			break
		}
		i := rng.IntN(len(r))
		switch rng.IntN(3) {
		case 0:
			r[i] = sampleRunes[rng.IntN(len(sampleRunes))]
		case 1:
			r = append(r[:i], r[i+1:]...)
		default:
			r = slices.Insert(r, i, sampleRunes[rng.IntN(len(sampleRunes))])
		}
	}
	return string(r)
}

// TestKeywordsSkipNoMatch: running a pattern only on the strings that hold
// one of its keywords (derived from the pattern: requiredLiterals) finds
// exactly what running every pattern on every string finds, on credential
// samples, random mutations of them and random strings over their runes.
func TestKeywordsSkipNoMatch(t *testing.T) {
	cc := &embeddedModel(t).creds
	for _, p := range cc.patterns {
		if !p.hasKeywords {
			t.Errorf("pattern %s has no keywords: it runs on every string", p.kind)
		}
	}
	if !cc.keyHasKeywords {
		t.Error("the secret-key pattern has no keywords")
	}
	rng := rand.New(rand.NewPCG(5, 24))
	samples := slices.Clone(credentialSamples)
	for range 20000 {
		s := credentialSamples[rng.IntN(len(credentialSamples))]
		samples = append(samples, mutateSample(rng, s, 1+rng.IntN(3)))
	}
	matched := 0
	for _, s := range samples {
		got, want := cc.kinds(s), everyPattern(cc, s)
		if !slices.Equal(got, want) {
			t.Fatalf("%q: kinds with keywords %v, every pattern %v", s, got, want)
		}
		if len(want) > 0 {
			matched++
		}
		gotKey := !cc.keyHasKeywords || containsAny(fold(s), cc.keyKeywords)
		if cc.secretKey.MatchString(s) && !gotKey {
			t.Fatalf("%q: the secret-key pattern matches, its keywords skip it", s)
		}
	}
	if matched < len(samples)/10 {
		t.Fatalf("only %d of %d samples match a pattern", matched, len(samples))
	}
}

// TestScanMatchesEveryPattern: the scan of a manifest (every keyword found
// in one pass over its strings joined by newlines) flags exactly the
// strings that running every pattern on every string flags, as values and
// as keys (with the secret-key pattern), on batches of samples and random
// mutations of them: a keyword that spans two strings belongs to neither.
func TestScanMatchesEveryPattern(t *testing.T) {
	m := embeddedModel(t)
	cc := &m.creds
	rng := rand.New(rand.NewPCG(7, 24))
	// halves of keywords, so that two adjacent strings may spell one
	halves := []string{"s3:/", "/b", "SIG", "=x", "BEAR", "ER abcdefghijklmnopqrstuvwxyz", "eyJ", "ghp", "_x", "-----BEGIN", "api", "_key"}
	flagged := 0
	for batch := range 400 {
		values := make([]any, 0, 40)
		keyed := map[string]any{}
		for range 40 {
			var s string
			if rng.IntN(4) == 0 {
				s = halves[rng.IntN(len(halves))]
			} else {
				s = mutateSample(rng, credentialSamples[rng.IntN(len(credentialSamples))], rng.IntN(3))
			}
			values = append(values, s)
			keyed[s] = "x"
		}
		got := m.credentials(map[string]any{"v": values, "k": keyed}, true)
		want := map[string]any{}
		for i, v := range values {
			s := v.(string)
			if k := everyPattern(cc, s); len(k) > 0 {
				want[fmt.Sprintf("/v/%d", i)] = k
			}
		}
		for s := range keyed {
			kinds := everyPattern(cc, s)
			if cc.secretKey.MatchString(s) {
				kinds = append(kinds, "secret-named field")
			}
			if len(kinds) > 0 {
				p := cc.pointer([]any{"k", s})
				prev, _ := want[p].([]string)
				want[p] = append(prev, kinds...)
			}
		}
		for p, k := range want {
			kinds := slices.Compact(slices.Sorted(slices.Values(k.([]string))))
			arr := make([]any, len(kinds))
			for i, x := range kinds {
				arr[i] = x
			}
			want[p] = arr
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("batch %d %q:\nscan          %v\nevery pattern %v", batch, values, got, want)
		}
		flagged += len(want)
	}
	if flagged < 400*10 {
		t.Fatalf("only %d places flagged in 400 batches", flagged)
	}
}

// BenchmarkCredentials is the credential scan of the llama3-8b fixture's
// manifest (no credential): the bound is 50 µs.
func BenchmarkCredentials(b *testing.B) {
	m := embeddedModel(b)
	manifest := map[string]any{"name": "llama3-8b-pretrain", "source": "torchtitan llama3_8b.toml",
		"hardware": map[string]any{"gpu_type": "A100-80GB", "fabric": "infiniband-hdr-200g", "region": "us-east-1"},
		"data": []any{map[string]any{"uri": "s3://ito-datasets/fineweb-edu/v1/", "license": "odc-by-1.0", "region": "us-east-1",
			"decontamination": map[string]any{"eval_suite": "ito-evals", "eval_suite_version": "2026.10", "method": "13-gram overlap",
				"report_digest": "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}},
		"checkpoint":  map[string]any{"storage_uri": "s3://ito-checkpoints/llama3-8b/", "storage_tier": "s3-standard"},
		"parallelism": map[string]any{"precision": "bf16", "activation_checkpointing": "selective", "engine": "torchtitan"},
		"model":       map[string]any{"name": "llama3-8b", "family": "llama"}, "objective": map[string]any{"kind": "pretrain"}}
	b.ReportAllocs()
	for b.Loop() {
		m.credentials(manifest, true)
	}
}

// BenchmarkCredentialsFixtures is the scan on each manifest of
// fixtures/manifests, as decoded for a decision (json.Number numbers).
func BenchmarkCredentialsFixtures(b *testing.B) {
	m := embeddedModel(b)
	paths, err := filepath.Glob(filepath.Join("..", "..", "fixtures", "manifests", "*.json"))
	if err != nil || len(paths) == 0 {
		b.Fatalf("no fixtures: %v", err)
	}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.UseNumber()
		var manifest any
		if err := dec.Decode(&manifest); err != nil {
			b.Fatal(err)
		}
		b.Run(strings.TrimSuffix(filepath.Base(p), ".json"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m.credentials(manifest, true)
			}
		})
	}
}
