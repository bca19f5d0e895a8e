package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/token"
)

// TestServeRefusesHostileTrust: `itogate serve --config` refuses to start on
// a trust file holding several PEM blocks or trailing data, a key whose type
// disagrees with its configured algorithm, an ambiguous JWKS or a negative
// leeway; the same configuration with sound files starts (and, its context
// already done, shuts down at once).
func TestServeRefusesHostileTrust(t *testing.T) {
	dir := t.TempDir()
	pub := func(name string) string {
		t.Helper()
		priv, err := token.GenerateECDSA()
		if err != nil {
			t.Fatal(err)
		}
		_, p, err := token.WriteKeyPair(dir, name, priv)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	callers, depositors, ent, conf, signer := pub("callers"), pub("depositors"), pub("entitlement"), pub("confirmation"), pub("signer")
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	config := func(signerFile, entAlg, leeway string) string {
		return `listen: 127.0.0.1:0
data_dir: ` + filepath.Join(dir, "data") + `
decision_log: "off"
trust:
  callers:      {issuer: https://idp.example, audience: itogate, pem_file: ` + callers + `, key_id: c1, algorithm: ES256, leeway: ` + leeway + `}
  depositors:   {issuer: https://desk.example/dep, audience: itogate-deposit, pem_file: ` + depositors + `, key_id: d1, algorithm: ES256}
  entitlement:  {issuer: https://backend.example, audience: itogate, type: ito-entitlement+jwt, pem_file: ` + ent + `, key_id: e1, algorithm: ` + entAlg + `}
  confirmation: {issuer: https://desk.example, audience: itogate, type: ito-confirmation+jwt, pem_file: ` + conf + `, key_id: f1, algorithm: ES256}
  manifest_signers:
    - {key_id: ci, pem_file: ` + signerFile + `}
`
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	start := func(cfg string) (string, error) {
		path := write("itogate.yaml", cfg)
		var logs bytes.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // start, then shut down at once
		err := runServe(ctx, &serveOptions{configFile: path}, slog.New(slog.NewJSONHandler(&logs, nil)))
		return logs.String(), err
	}
	if logs, err := start(config(signer, "ES256", "30s")); err != nil || !strings.Contains(logs, "itogate listening") {
		t.Fatalf("the sound configuration did not start: %v\n%s", err, logs)
	}
	key := read(signer)
	for _, tc := range []struct {
		name, cfg, want string
	}{
		{"signer PEM with two blocks", config(write("two.pem", key+key), "ES256", "30s"), "exactly one block"},
		{"signer PEM with trailing data", config(write("trail.pem", key+"# rotated 2026-11\n"), "ES256", "30s"), "exactly one block"},
		{"signer is a private key", config(filepath.Join(dir, "signer.key.pem"), "ES256", "30s"), "PRIVATE KEY"},
		{"entitlement EC key configured EdDSA", config(signer, "EdDSA", "30s"), "needs an Ed25519 key"},
		{"entitlement EC key configured HS256", config(signer, "HS256", "30s"), "not accepted"},
		{"negative leeway", config(signer, "ES256", "-5s"), "leeway must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs, err := start(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("runServe = %v, want an error with %q", err, tc.want)
			}
			if strings.Contains(logs, "itogate listening") {
				t.Fatal("it listened")
			}
		})
	}
}
