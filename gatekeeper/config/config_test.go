package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadGood(t *testing.T) {
	t.Parallel()
	c, err := Load(filepath.Join("testdata", "good.yml"))
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs("testdata")
	if c.Dev || c.Listen != "127.0.0.1:9443" || time.Duration(c.Policy.Deadline) != 100*time.Millisecond {
		t.Fatalf("loaded %+v", c)
	}
	if c.LedgerPath() != filepath.Join(abs, "data", "ledger.db") {
		t.Fatalf("ledger path %s (relative paths resolve against the config file)", c.LedgerPath())
	}
	// Unset keys stay zero: each component applies its own default.
	if c.Trust.Entitlement.Leeway != Duration(10*time.Second) || c.Trust.Callers.Leeway != 0 {
		t.Fatal("leeway")
	}
	if c.Limits != (Limits{}) || c.Policy.Bundle != nil || c.Ledger.SweepInterval != nil {
		t.Fatalf("unset keys given a value: %+v %+v", c.Limits, c.Ledger)
	}
	if slots, queue, wait := c.Limits.Evaluations(6); slots != 6 || queue != 0 || wait != 0 {
		t.Fatalf("default evaluation bound %d/%d/%s, want one slot per CPU and the admission defaults", slots, queue, wait)
	}
}

func TestEvaluationLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		l            Limits
		slots, queue int
		wait         time.Duration
	}{
		{Limits{}, 2, 0, 0},
		{Limits{MaxConcurrentEvaluations: -1, MaxQueuedEvaluations: 5}, 0, 0, 0},
		{Limits{MaxConcurrentEvaluations: 3, MaxQueuedEvaluations: 5, MaxQueueWait: Duration(time.Second)}, 3, 5, time.Second},
	} {
		slots, queue, wait := tc.l.Evaluations(2)
		if slots != tc.slots || queue != tc.queue || wait != tc.wait {
			t.Errorf("%+v on 2 CPUs: %d/%d/%s, want %d/%d/%s", tc.l, slots, queue, wait, tc.slots, tc.queue, tc.wait)
		}
	}
}

// Each bad file is refused with the reason named.
func TestLoadBad(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"unknown-key.bad.yml":             "field verify not found",
		"negative-leeway.bad.yml":         "leeway must not be negative",
		"same-type.bad.yml":               "different token types",
		"evals-shared-audience.bad.yml":   "trust.evals: audience is also trust.callers's",
		"evals-confirmation-type.bad.yml": "trust.evals: type is also trust.confirmation's",
		"no-signers.bad.yml":              "manifest_signers: at least one key",
		"negative-evaluations.bad.yml":    "limits.max_concurrent_evaluations must be -1 (no bound), 0 (one per CPU) or positive",
	}
	for file, want := range cases {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			_, err := Load(filepath.Join("testdata", file))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Load = %v, want %q", err, want)
			}
		})
	}
}

func TestDevIsLoopbackOnly(t *testing.T) {
	t.Parallel()
	for addr, ok := range map[string]bool{"127.0.0.1:8443": true, "[::1]:8443": true, "localhost:1": true,
		"0.0.0.0:8443": false, ":8443": false, "10.0.0.1:80": false} {
		c := Dev()
		c.Listen = addr
		err := c.LoopbackOnly()
		if (err == nil) != ok {
			t.Errorf("%s: %v", addr, err)
		}
	}
}
