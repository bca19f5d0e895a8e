package bundle_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/policies"
)

// loadPolicy writes a configuration whose policy section is policy and
// loads it.
func loadPolicy(t *testing.T, policy string) (config.Config, string, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bundle.pub.pem"), signerA.Key.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dev.pub.pem"), bundle.DevKey().PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := `listen: 127.0.0.1:9443
trust:
  callers:      {issuer: https://idp.example.com, audience: itogate, jwks_file: callers.jwks.json}
  depositors:   {issuer: https://desk.example.com, audience: itogate-deposit, jwks_file: desk.jwks.json}
  entitlement:  {issuer: https://backend.example.com, audience: itogate, type: ito-entitlement+jwt, jwks_file: ent.jwks.json}
  confirmation: {issuer: https://desk.example.com, audience: itogate, type: ito-confirmation+jwt, jwks_file: conf.jwks.json}
  manifest_signers:
    - {key_id: ci, pem_file: cosign.pub}
policy:
  deadline: 100ms
` + policy
	path := filepath.Join(dir, "itogate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	return c, dir, err
}

func TestConfigBundleSection(t *testing.T) {
	t.Parallel()
	c, dir, err := loadPolicy(t, `  bundle:
    file: b.tar.gz
    poll_interval: 10s
    max_age: 24h
    verification_keys:
      - {key_id: test-a, algorithm: ES256, pem_file: bundle.pub.pem}
`)
	if err != nil {
		t.Fatal(err)
	}
	b := c.Policy.Bundle
	if b.File != filepath.Join(dir, "b.tar.gz") || b.VerificationKeys[0].PEMFile != filepath.Join(dir, "bundle.pub.pem") {
		t.Fatalf("paths are not resolved against the config file: %+v", b)
	}
	opts, err := bundle.FromConfig(c.Policy, policies.Bundle(), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := opts.Source.(*bundle.File); !ok || opts.MaxAge != 24*time.Hour || opts.PollInterval != 10*time.Second ||
		opts.Deadline != 100*time.Millisecond {
		t.Fatalf("options %+v", opts)
	}

	c, _, err = loadPolicy(t, `  bundle:
    url: https://bundles.example.com/itogate.tar.gz
    verification_keys:
      - {key_id: test-a, algorithm: ES256, pem_file: bundle.pub.pem}
`)
	if err != nil {
		t.Fatal(err)
	}
	opts, err = bundle.FromConfig(c.Policy, policies.Bundle(), false)
	if err != nil {
		t.Fatal(err)
	}
	// Unset: zero, NewManager's DefaultPollInterval; development mode's own
	// default is DevPollInterval.
	if _, ok := opts.Source.(*bundle.HTTP); !ok || opts.PollInterval != 0 || opts.MaxAge != 0 {
		t.Fatalf("options %+v", opts)
	}
	if dev, err := bundle.FromConfig(c.Policy, policies.Bundle(), true); err != nil || dev.PollInterval != bundle.DevPollInterval {
		t.Fatalf("development mode: %+v %v", dev, err)
	}

	// No bundle section: the embedded bundle.
	c, _, err = loadPolicy(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if opts, err = bundle.FromConfig(c.Policy, policies.Bundle(), false); err != nil || opts.Source.String() != "embedded" {
		t.Fatalf("embedded: %v %v", opts.Source, err)
	}
}

// Each bad bundle section is refused at load, or (keys) when the source is
// built, with its reason named.
func TestConfigBundleSectionRefused(t *testing.T) {
	t.Parallel()
	key := "\n    verification_keys:\n      - {key_id: test-a, algorithm: ES256, pem_file: bundle.pub.pem}\n"
	cases := map[string]struct{ yaml, want string }{
		"file and url":       {"  bundle:\n    file: b\n    url: https://x/b" + key, "file or url, not both"},
		"neither":            {"  bundle:\n    max_age: 1h" + key, "file or url is required"},
		"no keys":            {"  bundle:\n    file: b\n", "at least one key"},
		"key without alg":    {"  bundle:\n    file: b\n    verification_keys:\n      - {key_id: a, pem_file: bundle.pub.pem}\n", "key_id, algorithm and pem_file"},
		"duplicate key id":   {"  bundle:\n    file: b" + key + "      - {key_id: test-a, algorithm: ES256, pem_file: bundle.pub.pem}\n", "given twice"},
		"url credentials":    {"  bundle:\n    url: https://u:p@x/b" + key, "credentials"},
		"url scheme":         {"  bundle:\n    url: file:///etc/b" + key, "http or https"},
		"fast poll":          {"  bundle:\n    file: b\n    poll_interval: 10ms" + key, "poll_interval below"},
		"negative max age":   {"  bundle:\n    file: b\n    max_age: -1h" + key, "must not be negative"},
		"huge max bytes":     {"  bundle:\n    file: b\n    max_bytes: 1099511627776" + key, "max_bytes"},
		"unknown field":      {"  bundle:\n    file: b\n    verify: false" + key, "field verify not found"},
		"old bundle_dir key": {"  bundle_dir: policies\n", "field bundle_dir not found"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, _, err := loadPolicy(t, tc.yaml)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load = %v, want %q", err, tc.want)
			}
		})
	}
}

// The development bundle key is trusted only in development mode; a key
// that does not fit its algorithm is refused when the source is built.
func TestFromConfigKeys(t *testing.T) {
	t.Parallel()
	c, _, err := loadPolicy(t, "  bundle:\n    file: b\n    verification_keys:\n      - {key_id: dev-bundle-1, algorithm: RS256, pem_file: dev.pub.pem}\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bundle.FromConfig(c.Policy, policies.Bundle(), false); err == nil || !strings.Contains(err.Error(), "development key") {
		t.Fatalf("production with the dev key: %v", err)
	}
	if _, err := bundle.FromConfig(c.Policy, policies.Bundle(), true); err != nil {
		t.Fatalf("development with the dev key: %v", err)
	}
	c, _, err = loadPolicy(t, "  bundle:\n    file: b\n    verification_keys:\n      - {key_id: x, algorithm: RS256, pem_file: bundle.pub.pem}\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bundle.FromConfig(c.Policy, policies.Bundle(), false); err == nil || !strings.Contains(err.Error(), "x") {
		t.Fatalf("ES key as RS256: %v", err)
	}
	c, _, err = loadPolicy(t, "  bundle:\n    file: b\n    verification_keys:\n      - {key_id: x, algorithm: ES256, pem_file: missing.pem}\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bundle.FromConfig(c.Policy, policies.Bundle(), false); err == nil {
		t.Fatal("missing key file accepted")
	}
	// Development mode without keys trusts the development bundle key.
	p := config.Policy{Bundle: &config.Bundle{File: "b"}}
	if _, err := bundle.FromConfig(p, policies.Bundle(), true); err != nil {
		t.Fatal(err)
	}
	if _, err := bundle.FromConfig(p, policies.Bundle(), false); err == nil {
		t.Fatal("production without keys accepted")
	}
}
