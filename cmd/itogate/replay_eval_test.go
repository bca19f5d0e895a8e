package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/replay"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/policies"
)

// TestReplayBundleArgument: a missing --bundle and the ito/ directory given
// instead of its parent are refused with a message naming the path (they
// said "open .: no such file or directory" and reported false flips).
func TestReplayBundleArgument(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "decisions.jsonl")
	writeMode(t, log, nil, 0o600)
	for _, tc := range []struct{ bundle, want, wantReplay string }{
		{filepath.Join(dir, "nope"), filepath.Join(dir, "nope") + ": no such directory", ""},
		// replay reads a file as a bundle archive, and refuses this one
		{log, "not a directory", "bundle: archive: not gzip"},
		{filepath.Join("..", "..", "policies", "ito"), "not a bundle root: it holds no ito/ directory (it looks like the ito/ directory itself: give its parent, " + filepath.Join("..", "..", "policies") + ")", ""},
	} {
		for _, args := range [][]string{
			{"replay", "--decisions", log, "--bundle", tc.bundle},
			{"eval", "--manifest", filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"), "--bundle-dir", tc.bundle},
		} {
			want := tc.want
			if args[0] == "replay" && tc.wantReplay != "" {
				want = tc.wantReplay
			}
			res := runCLI(t, args...)
			if res.exit != exitFailed || !strings.Contains(res.stderr, want) {
				t.Errorf("%s --bundle %s: exit %d, stderr %q; want %q", args[0], tc.bundle, res.exit, res.stderr, want)
			}
		}
	}
}

// TestReplayOfARealLog: the decision log of a real server — an allow, a
// policy deny, a deny whose manifest held a credential (masked), a
// secret-shaped key (redacted) and a refusal before the policy — replayed
// against the same bundle flips nothing; the masked decision is counted as
// masked, not as a flip.
func TestReplayOfARealLog(t *testing.T) {
	o := &serveOptions{}
	url, _ := startServe(t, o, true)
	r, m := scenarioFor(t, url, "llama3-8b")
	ctx := context.Background()
	if a, _, err := r.Create(ctx, m, "replay-allow"); err != nil || a.Status != 200 {
		t.Fatalf("allow: %+v %v", a, err)
	}
	if a, _, err := r.Create(ctx, m, "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlLXg"); err != nil || a.Status != 200 {
		t.Fatalf("allow with a secret-shaped key: %+v %v", a, err)
	}
	deny, err := r.LoadManifest("llama2-70b-v100-fsdp")
	if err != nil {
		t.Fatal(err)
	}
	if a, _, err := r.Create(ctx, deny, "replay-deny"); err != nil || a.Status != 403 {
		t.Fatalf("deny: %+v %v", a, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(m.Raw, &doc); err != nil {
		t.Fatal(err)
	}
	doc["data"].([]any)[0].(map[string]any)["uri"] = "https://user:hunter2@example.com/data/"
	raw, _ := json.Marshal(doc)
	cred, err := r.SignManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	if a, _, err := r.Create(ctx, cred, "replay-cred"); err != nil || a.Status != 403 {
		t.Fatalf("credential: %+v %v", a, err)
	}
	// Refused before the policy: a bad signature.
	if status, _ := r.Raw(ctx, api.AdmissionRequest{Action: "train.create", BookingID: scenario.Booking, IdempotencyKey: "replay-sig",
		Manifest: m.Raw, ManifestSignature: cred.Signature, EntitlementToken: "x", ConfirmationRef: "cfr_" + strings.Repeat("0", 32)}); status != 403 {
		t.Fatalf("bad signature: %d", status)
	}

	logPath := filepath.Join(o.dataDir, "decisions.jsonl")
	var events []decisionlog.Event
	patience.Until(t, "five decisions logged", func() bool {
		f, err := os.Open(logPath)
		if err != nil {
			return false
		}
		defer f.Close()
		events, err = decisionlog.Read(f)
		return err == nil && len(events) >= 5
	})
	res := runCLI(t, "replay", "--decisions", logPath, "--bundle", filepath.Join("..", "..", "policies"),
		"--deadline", patience.Deadline.String(), "--json")
	var rep replay.Report
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || res.exit != 0 {
		t.Fatalf("replay: exit %d, %v, stdout %q, stderr %q", res.exit, err, res.stdout, res.stderr)
	}
	if rep.Events != 5 || rep.Replayed != 3 || rep.Masked != 1 || rep.Skipped != 1 || rep.Unchanged != 3 || len(rep.Flips) != 0 {
		t.Fatalf("replay against the same bundle: %+v", rep)
	}
	// The embedded bundle is the same bundle: the same answer, as text.
	res = runCLI(t, "replay", "--decisions", logPath, "--deadline", patience.Deadline.String(), "--fail-on-flip")
	if res.exit != 0 || !strings.Contains(res.stdout, "events 5, replayed 3, skipped 1 (decided before the policy), masked 1") {
		t.Fatalf("replay (text): exit %d, %q", res.exit, res.stdout)
	}
}

// TestEvalMatchesTheFixtureCases: itogate eval answers every reference
// fixture with the outcome, codes and warnings fixtures/cases lists, and
// exits 0 on allow, 2 on deny.
func TestEvalMatchesTheFixtureCases(t *testing.T) {
	var doc struct {
		Cases []struct {
			Manifest string   `json:"manifest"`
			Allow    bool     `json:"allow"`
			Codes    []string `json:"codes"`
			Warnings []string `json:"warnings"`
		} `json:"cases"`
	}
	raw := mustRead(t, filepath.Join("..", "..", "fixtures", "cases", "policy-cases.json"))
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) < 6 {
		t.Fatalf("%d cases", len(doc.Cases))
	}
	dir := t.TempDir()
	for _, c := range doc.Cases {
		t.Run(c.Manifest, func(t *testing.T) {
			path := filepath.Join(dir, c.Manifest)
			writeMode(t, path, mustRead(t, filepath.Join("..", "..", "fixtures", "manifests", c.Manifest)), 0o600)
			res := runCLI(t, "eval", "--manifest", path, "--json", "--deadline", patience.Deadline.String())
			var out struct {
				Decision struct {
					Allow      bool
					Violations []struct{ Code string }
					Warnings   []struct{ Code string }
				}
			}
			if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
				t.Fatalf("eval: %v, stdout %q stderr %q", err, res.stdout, res.stderr)
			}
			wantExit := 0
			if !c.Allow {
				wantExit = exitDenied
			}
			var codes, warnings []string
			for _, v := range out.Decision.Violations {
				codes = append(codes, v.Code)
			}
			for _, w := range out.Decision.Warnings {
				warnings = append(warnings, w.Code)
			}
			slices.Sort(codes)
			slices.Sort(warnings)
			wantCodes, wantWarnings := slices.Sorted(slices.Values(c.Codes)), slices.Sorted(slices.Values(c.Warnings))
			if res.exit != wantExit || out.Decision.Allow != c.Allow || !slices.Equal(slices.Compact(codes), slices.Compact(wantCodes)) ||
				!slices.Equal(slices.Compact(warnings), slices.Compact(wantWarnings)) {
				t.Fatalf("eval: exit %d allow %v codes %v warnings %v; want exit %d allow %v codes %v warnings %v",
					res.exit, out.Decision.Allow, codes, warnings, wantExit, c.Allow, wantCodes, wantWarnings)
			}
		})
	}
}

// TestReplayAgainstASignedArchive: --bundle takes the signed archive the
// server activates, verified as activation verifies it. A real log — an
// allow and a deny — replays unchanged against the repository's policies
// signed, flips allow → deny against a signed bundle that denies
// everything, and an altered, unsigned or foreign-signed archive is refused
// with its reason (exit 4) before anything is replayed.
func TestReplayAgainstASignedArchive(t *testing.T) {
	o := &serveOptions{}
	url, _ := startServe(t, o, true)
	r, m := scenarioFor(t, url, "llama3-8b")
	ctx := context.Background()
	if a, _, err := r.Create(ctx, m, "archive-allow"); err != nil || a.Status != 200 {
		t.Fatalf("allow: %+v %v", a, err)
	}
	deny, err := r.LoadManifest("llama2-70b-v100-fsdp")
	if err != nil {
		t.Fatal(err)
	}
	if a, _, err := r.Create(ctx, deny, "archive-deny"); err != nil || a.Status != 403 {
		t.Fatalf("deny: %+v %v", a, err)
	}
	logPath := filepath.Join(o.dataDir, "decisions.jsonl")
	patience.Until(t, "two decisions logged", func() bool {
		f, err := os.Open(logPath)
		if err != nil {
			return false
		}
		defer f.Close()
		events, err := decisionlog.Read(f)
		return err == nil && len(events) >= 2
	})

	dir := t.TempDir()
	built := testNow().Add(-time.Minute)
	archive := func(name string, raw []byte) string {
		p := filepath.Join(dir, name)
		writeMode(t, p, raw, 0o600)
		return p
	}
	same := archive("same.tar.gz", signedPolicies(t, built, "same", false))
	frozenArchive := archive("frozen.tar.gz", signedPolicies(t, built, "frozen", true))
	replayJSON := func(args ...string) (cliResult, replay.Report) {
		res := runCLI(t, append([]string{"replay", "--decisions", logPath, "--json"}, args...)...)
		var rep replay.Report
		if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
			t.Fatalf("replay %v: %v, exit %d, stdout %q, stderr %q", args, err, res.exit, res.stdout, res.stderr)
		}
		return res, rep
	}
	res, rep := replayJSON("--bundle", same, "--fail-on-flip")
	if res.exit != 0 || rep.Replayed != 2 || rep.Unchanged != 2 || len(rep.Flips) != 0 || len(rep.Errors) != 0 ||
		!strings.Contains(res.stderr, "PUBLISHED development bundle key") {
		t.Fatalf("the same policies, signed: exit %d %+v, stderr %q", res.exit, rep, res.stderr)
	}
	res, rep = replayJSON("--bundle", frozenArchive, "--fail-on-flip")
	if res.exit != exitReplayFlip || rep.Replayed != 2 || rep.AllowToDeny != 1 || rep.DenyToAllow != 0 || len(rep.Flips) != 2 ||
		len(rep.Errors) != 0 || rep.ByCode["BUNDLE_FROZEN"].Added != 2 {
		t.Fatalf("a frozen bundle: exit %d %+v", res.exit, rep)
	}

	other := bundletest.NewSigner("other")
	for name, raw := range map[string][]byte{
		"bundle: signature": bundletest.Rewrite(t, signedPolicies(t, built, "altered", false), func(f map[string][]byte) {
			f["/ito/admission/admission.rego"] = []byte(frozen)
		}),
		"bundle: unsigned": bundletest.Build(t, bundletest.Spec{Files: bundletest.FromFS(t, policies.Bundle()),
			Manifest: bundletest.Manifest(bundletest.Revision(built, "unsigned"), built)}, nil),
		"bundle: signature ": bundletest.Build(t, bundletest.Spec{Files: bundletest.FromFS(t, policies.Bundle()),
			Manifest: bundletest.Manifest(bundletest.Revision(built, "foreign"), built)}, &other),
	} {
		p := archive(strings.ReplaceAll(strings.TrimSpace(name), ": ", "-")+strconv.Itoa(len(name))+".tar.gz", raw)
		res := runCLI(t, "replay", "--decisions", logPath, "--bundle", p)
		if res.exit != exitFailed || !strings.Contains(res.stderr, strings.TrimSpace(name)+": ") || res.stdout != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", name, res.exit, res.stdout, res.stderr)
		}
	}
	// The key flags verify an archive only.
	if res := runCLI(t, "replay", "--decisions", logPath, "--bundle", filepath.Join("..", "..", "policies"), "--key-id", "k",
		"--verification-key", filepath.Join("..", "..", "fixtures", "keys", "dev-bundle.pub.pem")); res.exit != exitFailed ||
		!strings.Contains(res.stderr, "--bundle is not one") {
		t.Errorf("key flags with a directory: exit %d, stderr %q", res.exit, res.stderr)
	}
}

// TestReplayOfASlowCandidate: a candidate that cannot decide within
// --deadline (a policy made slow on purpose, a bound it can never meet)
// exits 5, could not evaluate, and lists the decision as an evaluation
// error — never as an allow → deny flip.
func TestReplayOfASlowCandidate(t *testing.T) {
	dir := t.TempDir()
	files := bundletest.FromFS(t, policies.Bundle())
	// Nine million iterations per decision: far past the millisecond given.
	files["ito/admission/slow.rego"] = `package ito.admission

_violations contains {"code": "SLOW", "gate": "admission", "message": "slow"} if {
	count([i | some i in numbers.range(1, 3000); some j in numbers.range(1, 3000); i == j + 4000]) > 0
}
`
	bundleDir := filepath.Join(dir, "slow")
	for name, body := range files {
		p := filepath.Join(bundleDir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		writeMode(t, p, []byte(body), 0o600)
	}
	log := filepath.Join(dir, "decisions.jsonl")
	writeMode(t, log, []byte(`{"decision_id":"dec_slow","time":"2026-01-01T00:00:00Z","account":"a","action":"train.create",`+
		`"idempotency_key":"k","request_digest":"sha256:00","bundle_revision":"r","result":"allow","status":200,"latency_seconds":0,`+
		`"policy_result":"allow","policy_warnings":[],"input":{"action":"train.create"}}`+"\n"+
		`{"decision_id":"dec_timeout","time":"2026-01-01T00:00:00Z","account":"a","action":"train.create",`+
		`"idempotency_key":"k2","request_digest":"sha256:01","bundle_revision":"r","result":"deny","status":503,"latency_seconds":0.3,`+
		`"codes":["POLICY_TIMEOUT"]}`+"\n"), 0o600)
	res := runCLI(t, "replay", "--decisions", log, "--bundle", bundleDir, "--deadline", "1ms", "--fail-on-flip", "--json")
	var rep replay.Report
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("replay: %v, exit %d, stdout %q, stderr %q", err, res.exit, res.stdout, res.stderr)
	}
	if res.exit != exitReplayUnevaluated || len(rep.Flips) != 0 || rep.AllowToDeny != 0 || len(rep.Errors) != 1 ||
		rep.Errors[0].Code != "POLICY_TIMEOUT" || rep.BaselineErrors != 1 || rep.BaselineByCode["POLICY_TIMEOUT"] != 1 {
		t.Fatalf("a slow candidate: exit %d %+v", res.exit, rep)
	}
}
