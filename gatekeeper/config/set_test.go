package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSet: a --set assignment reaches the key it names, with the file's
// types, and leaves every other key as it was.
func TestSet(t *testing.T) {
	t.Parallel()
	c := Dev()
	for _, a := range []string{
		"limits.request_timeout=10s",
		"listen=127.0.0.1:9443",
		"policy.bundle.file=bin/bundle.tar.gz",
		"policy.bundle.max_age=720h",
		"webhook.namespaces.team-a=acct_demo",
		"webhook.namespaces.team-b=acct_other",
		`ledger.dsn="postgres://itogate@db/itogate?sslmode=disable"`,
		"ledger.driver=postgres",
		"ledger.sweep_interval=0s",
		"limits.max_concurrent_evaluations=-1",
		"decision_log=off",
	} {
		if err := c.SetAll(a); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
	}
	if time.Duration(c.Limits.RequestTimeout) != 10*time.Second || c.Listen != "127.0.0.1:9443" || c.DataDir != "./data" ||
		c.Limits.MaxConcurrentEvaluations != -1 || c.DecisionLog != "off" || !c.Dev {
		t.Fatalf("config %+v", c)
	}
	if b := c.Policy.Bundle; b == nil || b.File != "bin/bundle.tar.gz" || time.Duration(b.MaxAge) != 720*time.Hour || b.URL != "" {
		t.Fatalf("policy.bundle %+v", b)
	}
	if c.Webhook == nil || len(c.Webhook.Namespaces) != 2 || c.Webhook.Namespaces["team-b"] != "acct_other" {
		t.Fatalf("webhook %+v", c.Webhook)
	}
	if c.Ledger.Driver != DriverPostgres || c.Ledger.DSN != "postgres://itogate@db/itogate?sslmode=disable" ||
		c.Ledger.SweepInterval == nil || *c.Ledger.SweepInterval != 0 {
		t.Fatalf("ledger %+v", c.Ledger)
	}
	if err := c.Set("policy.bundle", "null"); err != nil || c.Policy.Bundle != nil {
		t.Fatalf("null: %v, %+v", err, c.Policy.Bundle)
	}
	if err := c.Set("decision_log", ""); err != nil || c.DecisionLog != "" {
		t.Fatalf("empty value: %v, %q", err, c.DecisionLog)
	}
}

// TestSetIsStrict: a typo, a wrong type, a key outside the file's keys
// (dev is never read from YAML) or an assignment without "=" is an error
// naming it, and changes nothing.
func TestSetIsStrict(t *testing.T) {
	t.Parallel()
	for a, want := range map[string]string{
		"limits.request_timout=10s":      "--set limits.request_timout=10s: field request_timout not found in type config.Limits",
		"limits.request_timeout=ten":     `--set limits.request_timeout=ten: time: invalid duration "ten"`,
		"limits.max_body_bytes=lots":     "--set limits.max_body_bytes=lots: cannot unmarshal !!str `lots` into int64",
		"dev=true":                       "--set dev=true: field dev not found in type config.Config",
		"listen":                         `--set "listen": want key=value, the key dotted as in the file (limits.request_timeout=10s)`,
		"=x":                             `--set "=x": want key=value, the key dotted as in the file (limits.request_timeout=10s)`,
		"limits..request_timeout=1s":     `--set limits..request_timeout=1s: key "limits..request_timeout": empty segment`,
		"policy.bundle.file=[unclosed":   "--set policy.bundle.file=[unclosed: value: yaml: line 1: did not find expected ',' or ']'",
		"webhook.namespaces=not-a-map":   "--set webhook.namespaces=not-a-map: cannot unmarshal !!str `not-a-map` into map[string]string",
		"trust.callers.issuer.extra=bad": "--set trust.callers.issuer.extra=bad: cannot unmarshal !!map into string",
	} {
		c := Dev()
		err := c.SetAll(a)
		if err == nil || err.Error() != want {
			t.Errorf("%s: %v\nwant %s", a, err, want)
		}
	}
}

// TestLoadWithSet: --set applies to a file as if written in it: relative
// paths resolve against the file's directory, and validation sees the
// result.
func TestLoadWithSet(t *testing.T) {
	t.Parallel()
	c, err := Load(filepath.Join("testdata", "good.yml"), "data_dir=elsewhere", "limits.request_timeout=7s")
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs("testdata")
	if c.DataDir != filepath.Join(abs, "elsewhere") || time.Duration(c.Limits.RequestTimeout) != 7*time.Second {
		t.Fatalf("data_dir %s, request_timeout %s", c.DataDir, time.Duration(c.Limits.RequestTimeout))
	}
	if _, err := Load(filepath.Join("testdata", "good.yml"), "trust.manifest_signers=[]"); err == nil ||
		!strings.Contains(err.Error(), "trust.manifest_signers: at least one key") {
		t.Fatalf("an invalid --set was not validated: %v", err)
	}
}

// TestDevValidate: the development configuration is valid as it is and
// with a bundle file without keys (the development bundle key verifies
// it); it refuses non-loopback listeners and any trust or tickets section.
func TestDevValidate(t *testing.T) {
	t.Parallel()
	if err := Dev().Validate(); err != nil {
		t.Fatalf("Dev(): %v", err)
	}
	ok := Dev()
	if err := ok.SetAll("policy.bundle.file=b.tar.gz", "webhook.listen=127.0.0.1:9443", "webhook.cert_file=c.pem",
		"webhook.key_file=k.pem", "webhook.namespaces.team-a=acct_demo"); err != nil {
		t.Fatal(err)
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("development bundle and webhook: %v", err)
	}
	for name, tc := range map[string]struct{ sets, want string }{
		"listen":          {"listen=0.0.0.0:8443", `listen: development mode listens on loopback only, not "0.0.0.0:8443"`},
		"webhook listen":  {"webhook={listen: ':9443', cert_file: c, key_file: k}", `webhook.listen: development mode listens on loopback only, not ":9443"`},
		"trust":           {"trust.callers.issuer=https://idp.example", "trust: development mode trusts the published development keys (fixtures/keys) only; configure trust in a --config file"},
		"tickets":         {"tickets.leeway=1m", "tickets: development mode signs tickets with the published development ticket key; configure tickets in a --config file"},
		"bundle url":      {"policy.bundle.url=ftp://x", "policy.bundle: url must be an absolute http or https URL"},
		"negative limits": {"limits.request_timeout=-1s", "limits.request_timeout must not be negative"},
		"rotate negative": {"decision_log_rotate.max_age=-1h", "decision_log_rotate: max_size_mb, max_age and max_backups must not be negative"},
		"rotate tiny":     {"decision_log_rotate.max_size_mb=1", "decision_log_rotate: max_size_mb must be 0 (100) or at least 16: a file must hold any one line"},
	} {
		c := Dev()
		if err := c.SetAll(tc.sets); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := c.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v\nwant %s", name, err, tc.want)
		}
	}
}

// TestValidateIsDeterministic: a configuration with several problems, some
// found in maps (purposes, ledger timeouts, webhook namespaces), is
// reported with the same message, in the order of the file, every time.
func TestValidateIsDeterministic(t *testing.T) {
	t.Parallel()
	c, err := Load(filepath.Join("testdata", "good.yml"))
	if err != nil {
		t.Fatal(err)
	}
	neg := Duration(-time.Second)
	c.Listen = "nowhere"
	c.Ledger = Ledger{Driver: DriverPostgres, DSN: "postgres://db/itogate", ConnectTimeout: neg, StatementTimeout: neg,
		AcquireTimeout: neg, MigrationTimeout: neg}
	c.Trust.Evals = TokenTrust{Issuer: c.Trust.Callers.Issuer, Audience: "itogate", Type: TypeEntitlement, JWKSFile: "e.json"}
	c.Trust.Callers = TokenTrust{Issuer: c.Trust.Callers.Issuer}
	c.Trust.Confirmation.Issuer = ""
	c.Tickets = &Tickets{Issuer: "https://itogate.example", Audience: "itogate",
		SigningKey: TicketKey{PEMFile: "t.pem", KeyID: "t1", Algorithm: "EdDSA"}}
	c.Webhook = &Webhook{Listen: ":9443", Namespaces: map[string]string{"a": "", "b": "", "": "c"}}
	c.Limits.RequestTimeout = neg
	const want = "listen: address nowhere: missing port in address\n" +
		"ledger: connect_timeout must not be negative\n" +
		"statement_timeout must not be negative\n" +
		"acquire_timeout must not be negative\n" +
		"migration_timeout must not be negative\n" +
		"trust.callers: issuer and audience are required\n" +
		"jwks_file or pem_file is required\n" +
		"trust.confirmation: issuer and audience are required\n" +
		"trust.evals: issuer is also trust.callers's; the eval authority needs its own\n" +
		"trust.evals: audience is also trust.entitlement's; the eval authority needs its own\n" +
		"trust.evals: type is also trust.entitlement's; the eval authority needs its own\n" +
		"trust.evals: audience is also trust.confirmation's; the eval authority needs its own\n" +
		`tickets: audience "itogate" is also trust.entitlement's: tickets need their own` + "\n" +
		`audience "itogate" is also trust.confirmation's: tickets need their own` + "\n" +
		"webhook: cert_file and key_file are required (the apiserver calls webhooks over TLS only)\n" +
		"namespaces: empty namespace or account\n" +
		"namespaces: empty namespace or account\n" +
		"namespaces: empty namespace or account\n" +
		"limits.request_timeout must not be negative"
	for i := range 50 {
		if err := c.Validate(); err == nil || err.Error() != want {
			t.Fatalf("run %d:\n%v\nwant\n%s", i, err, want)
		}
	}
}
