package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/replay"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/internal/patience"
)

// TestReplayBundleArgument: a missing --bundle and the ito/ directory given
// instead of its parent are refused with a message naming the path (they
// said "open .: no such file or directory" and reported false flips).
func TestReplayBundleArgument(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "decisions.jsonl")
	writeMode(t, log, nil, 0o600)
	for _, tc := range []struct{ bundle, want string }{
		{filepath.Join(dir, "nope"), filepath.Join(dir, "nope") + ": no such directory"},
		{log, "not a directory"},
		{filepath.Join("..", "..", "policies", "ito"), "not a bundle root: it holds no ito/ directory (it looks like the ito/ directory itself: give its parent, " + filepath.Join("..", "..", "policies") + ")"},
	} {
		for _, args := range [][]string{
			{"replay", "--decisions", log, "--bundle", tc.bundle},
			{"eval", "--manifest", filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"), "--bundle-dir", tc.bundle},
		} {
			res := runCLI(t, args...)
			if res.exit != exitFailed || !strings.Contains(res.stderr, tc.want) {
				t.Errorf("%s --bundle %s: exit %d, stderr %q; want %q", args[0], tc.bundle, res.exit, res.stderr, tc.want)
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
