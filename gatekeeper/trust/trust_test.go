package trust

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// writeKey writes a fresh ES256 public key and returns its path and signer.
func writeKey(t *testing.T, dir, name string) string {
	t.Helper()
	priv, err := token.GenerateECDSA()
	if err != nil {
		t.Fatal(err)
	}
	_, pub, err := token.WriteKeyPair(dir, name, priv)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

func prodTrust(t *testing.T) (config.Trust, string) {
	dir := t.TempDir()
	tt := func(iss, aud, typ, name string) config.TokenTrust {
		return config.TokenTrust{Issuer: iss, Audience: aud, Type: typ, PEMFile: writeKey(t, dir, name), KeyID: name, Algorithm: "ES256"}
	}
	return config.Trust{
		Callers:         tt("https://idp", "itogate", "", "callers"),
		Depositors:      tt("https://desk", "itogate-deposit", "", "depositors"),
		Entitlement:     tt("https://backend", "itogate", config.TypeEntitlement, "entitlement"),
		Confirmation:    tt("https://desk", "itogate", config.TypeConfirmation, "confirmation"),
		ManifestSigners: []config.ManifestKey{{KeyID: "ci", PEMFile: writeKey(t, dir, "manifest")}},
	}, dir
}

func TestFromConfigBuildsSeparateVerifiers(t *testing.T) {
	t.Parallel()
	tr, _ := prodTrust(t)
	s, err := FromConfig(tr)
	if err != nil {
		t.Fatal(err)
	}
	if s.Callers.Purpose() != verify.PurposeCaller || s.Entitlement.Purpose() != verify.PurposeEntitlement ||
		s.Confirmation.Purpose() != verify.PurposeConfirmation || s.Depositors.Purpose() != verify.PurposeDepositor {
		t.Fatal("purposes mixed up")
	}
}

func TestFromConfigRefusesDevAndSharedKeys(t *testing.T) {
	t.Parallel()
	dev := keys.Dev()
	devPub := filepath.Join(t.TempDir(), "dev.pub.pem")
	if err := os.WriteFile(devPub, dev.Entitlement.PublicPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(*config.Trust)
		want string
	}{
		{"dev entitlement key", func(tr *config.Trust) { tr.Entitlement.PEMFile = devPub }, "development key"},
		{"dev manifest key", func(tr *config.Trust) { tr.ManifestSigners[0].PEMFile = devPub }, "development key"},
		{"shared key", func(tr *config.Trust) { tr.Confirmation.PEMFile = tr.Entitlement.PEMFile }, "purposes need separate keys"},
		{"manifest key reused for callers", func(tr *config.Trust) { tr.ManifestSigners[0].PEMFile = tr.Callers.PEMFile }, "purposes need separate keys"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, _ := prodTrust(t)
			tc.edit(&tr)
			_, err := FromConfig(tr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("FromConfig = %v, want %q", err, tc.want)
			}
		})
	}
}

// A development entitlement token never verifies as a confirmation, and the
// reverse: purposes are separated by key, issuer and type.
func TestDevPurposesAreSeparate(t *testing.T) {
	t.Parallel()
	s, err := Dev()
	if err != nil {
		t.Fatal(err)
	}
	d := keys.Dev()
	now := time.Now()
	claims := map[string]any{"iss": DevConfirmationIssuer, "aud": DevAudience, "sub": "a", "jti": "j",
		"iat": now.Unix(), "exp": now.Add(time.Minute).Unix()}
	tok, err := token.Mint(d.Entitlement.Private, d.Entitlement.KeyID, d.Entitlement.Algorithm, config.TypeConfirmation, claims)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Confirmation.Verify(tok, now); err == nil {
		t.Fatal("an entitlement key verified a confirmation")
	}
	tok, _ = token.Mint(d.Confirmation.Private, d.Confirmation.KeyID, d.Confirmation.Algorithm, config.TypeConfirmation, claims)
	if _, err := s.Confirmation.Verify(tok, now); err != nil {
		t.Fatalf("the confirmation key itself: %v", err)
	}
	if _, err := s.Entitlement.Verify(tok, now); err == nil {
		t.Fatal("a confirmation verified as an entitlement")
	}
}

// TestSchedulerPurposeIsSeparate: a scheduler's token (the online ticket
// check) never verifies as a caller's, nor a caller's as a scheduler's,
// in development mode; in production trust.schedulers builds its own
// verifier and refuses a key another purpose uses.
func TestSchedulerPurposeIsSeparate(t *testing.T) {
	t.Parallel()
	s, err := Dev()
	if err != nil {
		t.Fatal(err)
	}
	d := keys.Dev()
	now := time.Now()
	mint := func(k keys.Key, iss, aud string) []byte {
		tok, err := token.Mint(k.Private, k.KeyID, k.Algorithm, "", map[string]any{"iss": iss, "aud": aud,
			"sub": "slurm-ctl", "account": "acct-1", "iat": now.Unix(), "exp": now.Add(time.Minute).Unix()})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	sched := mint(d.Scheduler, DevSchedulerIssuer, DevSchedulerAudience)
	if c, err := s.Schedulers.Verify(sched, now); err != nil || c.Subject != "slurm-ctl" {
		t.Fatalf("the scheduler's own token: %v", err)
	}
	if s.Schedulers.Purpose() != verify.PurposeScheduler {
		t.Fatalf("purpose %s", s.Schedulers.Purpose())
	}
	for name, tok := range map[string][]byte{
		"a scheduler token as a caller":           sched,
		"the scheduler key with the caller's iss": mint(d.Scheduler, DevCallerIssuer, DevAudience),
	} {
		if _, err := s.Callers.Verify(tok, now); err == nil {
			t.Errorf("%s verified", name)
		}
	}
	for name, tok := range map[string][]byte{
		"a caller token as a scheduler":           mint(d.Caller, DevCallerIssuer, DevAudience),
		"the caller key with the scheduler's iss": mint(d.Caller, DevSchedulerIssuer, DevSchedulerAudience),
		"the revoker key":                         mint(d.Revoker, DevSchedulerIssuer, DevSchedulerAudience),
	} {
		if _, err := s.Schedulers.Verify(tok, now); err == nil {
			t.Errorf("%s verified as a scheduler", name)
		}
	}

	tr, dir := prodTrust(t)
	tr.Schedulers = config.TokenTrust{Issuer: "https://slurm", Audience: "itogate-scheduler",
		PEMFile: writeKey(t, dir, "schedulers"), KeyID: "schedulers", Algorithm: "ES256"}
	ps, err := FromConfig(tr)
	if err != nil || ps.Schedulers == nil || ps.Schedulers.Purpose() != verify.PurposeScheduler {
		t.Fatalf("FromConfig with schedulers: %v", err)
	}
	if tr2, _ := prodTrust(t); true {
		if ps, err := FromConfig(tr2); err != nil || ps.Schedulers != nil {
			t.Fatalf("FromConfig without schedulers: %v, Schedulers %v", err, ps.Schedulers)
		}
	}
	tr.Schedulers.PEMFile = tr.Callers.PEMFile
	if _, err := FromConfig(tr); err == nil || !strings.Contains(err.Error(), "purposes need separate keys") {
		t.Fatalf("FromConfig with the callers' key for schedulers = %v", err)
	}
}

// TestEvalReportPurposeIsSeparate: the eval authority's report is the only
// credential of POST /v1/runs/{run_id}/eval-reports, so no other purpose's
// key may make one that verifies with trust.evals — not even with the eval
// authority's typ, issuer and audience — and an eval report never verifies
// as a caller's, depositor's, revoker's or scheduler's bearer token.
func TestEvalReportPurposeIsSeparate(t *testing.T) {
	t.Parallel()
	s, err := Dev()
	if err != nil {
		t.Fatal(err)
	}
	d := keys.Dev()
	now := time.Now()
	report := func(k keys.Key) []byte {
		tok, err := token.Mint(k.Private, k.KeyID, k.Algorithm, config.TypeEvals, map[string]any{
			"iss": DevEvalsIssuer, "aud": DevEvalsAudience, "sub": "eval-authority", "jti": "j-" + k.KeyID,
			"iat": now.Unix(), "exp": now.Add(time.Minute).Unix(), "kind": "eval_report", "account": "acct-1"})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	own := report(d.Evals)
	if c, err := s.Evals.Verify(own, now); err != nil || c.Raw["kind"] != "eval_report" {
		t.Fatalf("the eval authority's own report: %v", err)
	}
	for _, k := range d.All() {
		if k.KeyID == d.Evals.KeyID {
			continue
		}
		if _, err := s.Evals.Verify(report(k), now); err == nil {
			t.Errorf("an eval report signed with the %s key verified with trust.evals", k.KeyID)
		}
	}
	for name, v := range map[string]interface {
		Verify([]byte, time.Time) (*verify.Claims, error)
	}{"caller": s.Callers, "depositor": s.Depositors, "revoker": s.Revokers, "scheduler": s.Schedulers} {
		if _, err := v.Verify(own, now); err == nil {
			t.Errorf("an eval report verified as a %s bearer token", name)
		}
	}
}
