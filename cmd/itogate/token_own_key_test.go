package main

import (
	"bytes"
	"crypto"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/trust"
)

// TestTokenOwnKey: `itogate token <kind> --key/--kid/--issuer/--audience`
// signs with the operator's key, and the production trust set built from the
// matching pem_file + key_id + algorithm (what examples/production/itogate.yaml
// configures) accepts it for that purpose and no other.
func TestTokenOwnKey(t *testing.T) {
	set, pems := ownKeyTrust(t)
	ent, stderr, err := mintWithRoot("entitlement", "--key", pems["entitlement"]+".key.pem", "--kid", "entitlement-1",
		"--issuer", "https://backend.example.com", "--audience", "itogate", "--account", "acct_42",
		"--booking", "bk_42", "--gpu", "H100-SXM-80GB", "--nodes", "2", "--gpus-per-node", "8",
		"--region", "us-east-1", "--fabric", "infiniband-ndr")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "stale 300 s later") {
		t.Errorf("stderr does not say when the entitlement goes stale: %q", stderr)
	}
	c, err := set.Entitlement.Verify([]byte(ent), time.Now())
	if err != nil {
		t.Fatalf("production entitlement verifier refused the --key token: %v", err)
	}
	if c.Subject != "acct_42" || c.Issuer != "https://backend.example.com" || c.Raw["booking_id"] != "bk_42" {
		t.Fatalf("claims = %+v", c)
	}
	// Purpose separation holds for own keys too: the confirmation and caller
	// verifiers refuse an entitlement.
	if _, err := set.Confirmation.Verify([]byte(ent), time.Now()); err == nil {
		t.Fatal("confirmation verifier accepted an entitlement")
	}
	if _, err := set.Callers.Verify([]byte(ent), time.Now()); err == nil {
		t.Fatal("caller verifier accepted an entitlement")
	}

	caller, _, err := mintWithRoot("caller", "--key", pems["caller"]+".key.pem", "--kid", "caller-1",
		"--issuer", "https://idp.example.com", "--audience", "itogate", "--account", "acct_42")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := set.Callers.Verify([]byte(caller), time.Now()); err != nil || c.Raw["account"] != "acct_42" {
		t.Fatalf("caller: %+v, %v", c, err)
	}
}

// TestTokenOwnKeyFlagsTogether: flags that only make sense together are
// refused, saying what is missing.
func TestTokenOwnKeyFlagsTogether(t *testing.T) {
	_, pems := ownKeyTrust(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"caller", "--key", pems["caller"] + ".key.pem"}, "--key needs --kid, --issuer and --audience"},
		{[]string{"caller", "--kid", "caller-1"}, "go with --key"},
		{[]string{"confirmation", "--key", pems["confirmation"] + ".key.pem", "--kid", "c", "--issuer", "i",
			"--audience", "a", "--cost", "1.00", "--deposit"}, "needs the depositor's bearer token"},
		{[]string{"confirmation", "--cost", "1.00", "--depositor-token-file", "-"}, "--depositor-token-file goes with --deposit and --key"},
	} {
		t.Setenv("ITOGATE_DEPOSITOR_TOKEN", "")
		if _, _, err := mintWithRoot(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("token %v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}

// ownKeyTrust writes one key pair per purpose (<dir>/<purpose>.key.pem and
// .pub.pem; pems maps the purpose to that stem) and builds the production
// trust set that pins their public keys.
func ownKeyTrust(t *testing.T) (set *trust.Set, pems map[string]string) {
	t.Helper()
	dir := t.TempDir()
	pems = map[string]string{}
	for _, p := range []string{"caller", "depositor", "entitlement", "confirmation", "manifest"} {
		k, err := token.GenerateECDSA()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := token.WriteKeyPair(dir, p, k); err != nil {
			t.Fatal(err)
		}
		pems[p] = filepath.Join(dir, p)
	}
	tt := func(p, iss, aud, typ string) config.TokenTrust {
		return config.TokenTrust{Issuer: iss, Audience: aud, Type: typ,
			PEMFile: pems[p] + ".pub.pem", KeyID: p + "-1", Algorithm: "ES256"}
	}
	set, err := trust.FromConfig(config.Trust{
		Callers:         tt("caller", "https://idp.example.com", "itogate", ""),
		Depositors:      tt("depositor", "https://desk.example.com", "itogate-deposit", ""),
		Entitlement:     tt("entitlement", "https://backend.example.com", "itogate", config.TypeEntitlement),
		Confirmation:    tt("confirmation", "https://desk.example.com", "itogate", config.TypeConfirmation),
		ManifestSigners: []config.ManifestKey{{KeyID: "manifest-1", PEMFile: pems["manifest"] + ".pub.pem"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return set, pems
}

// mintWithRoot runs `itogate token ARGS` through the root command, as the
// binary does, and returns its standard output and error.
func mintWithRoot(args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	root := newRootCmd(&out, &errOut)
	root.SetArgs(append([]string{"token"}, args...))
	err = root.Execute()
	return strings.TrimSpace(out.String()), errOut.String(), err
}

// TestKeyAlgorithm: `bundle inspect` without --algorithm follows the key, so
// the ES256 key `itogate keygen` makes works as bundles/README shows it.
func TestKeyAlgorithm(t *testing.T) {
	ec, err := token.GenerateECDSA()
	if err != nil {
		t.Fatal(err)
	}
	ed, err := token.GenerateEd25519()
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := token.GenerateRSA(2048)
	if err != nil {
		t.Fatal(err)
	}
	for want, k := range map[string]crypto.Signer{"ES256": ec, "EdDSA": ed, "RS256": rsaKey} {
		pem, err := token.MarshalPublicKeyPEM(k.Public())
		if err != nil {
			t.Fatal(err)
		}
		if got, err := keyAlgorithm(pem); err != nil || got != want {
			t.Errorf("keyAlgorithm(%T) = %q, %v; want %s", k, got, err, want)
		}
	}
	if _, err := keyAlgorithm([]byte("not a key")); err == nil {
		t.Error("keyAlgorithm(garbage): want an error")
	}
}
