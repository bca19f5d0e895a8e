package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
	"github.com/itocompute/itogate/gatekeeper/inert"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/internal/patience"
)

// hostile is a string from outside that would act on a terminal: clear
// screen and home (CSI), window title (OSC 0), clipboard write (OSC 52),
// 8-bit CSI, a right-to-left override and isolate, DEL, a carriage return,
// and a newline starting a forged line.
const hostile = "\x1b[2J\x1b[H\x1b]0;owned\x07\x1b]52;c;ZXZpbA==\x07\u009b31m\u202eevil\u2066\x7f\r\nFORGED ALLOW run_id=x\x1bP"

// checkInert fails when out holds a raw control character (C0 but the
// newline, DEL, C1, a bidi control, a line separator, invalid UTF-8) or a
// line the hostile string started.
func checkInert(t *testing.T, what, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if !inert.Safe(line) {
			t.Errorf("%s: raw control characters reach the output: %q", what, line)
		}
		if strings.HasPrefix(strings.TrimSpace(line), "FORGED") {
			t.Errorf("%s: a line of its own from outside: %q", what, line)
		}
	}
}

// envelopeServer answers every request with status and the JSON of body.
func envelopeServer(t *testing.T, status int, body any) (url string, raw []byte) {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(raw)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, raw
}

// TestHumanOutputIsInert: each command's human output, fed hostile strings
// where it prints strings from outside — the server's answer (train,
// status, token --deposit, demo), a ticket's claims (ticket verify), a
// bundle's findings and estimates (eval --bundle-dir), a decision log
// (replay), a manifest's field names (verify), file names (sign, verify,
// bundle inspect, eval) and error messages — holds no raw control
// character on stdout or stderr and no line the hostile string started.
// --json is the server's body, byte for byte.
func TestHumanOutputIsInert(t *testing.T) {
	tok, ent := exitClientFiles(t)
	dir := t.TempDir()
	allow := map[string]any{"ok": true, "live_api_contacted": false, "notice": hostile, "data": map[string]any{
		"decision": "allow", "action": hostile, "run_id": hostile, "state": hostile, "decision_id": hostile,
		"manifest_digest": hostile, "booking_id": hostile, "idempotency_key": hostile, "bundle_revision": hostile, "gpus": 0}}
	deny := map[string]any{"ok": false, "live_api_contacted": false, "notice": hostile, "error": map[string]any{
		"code": hostile, "message": hostile, "decision_id": hostile,
		"violations": []map[string]any{{"code": hostile, "gate": hostile, "message": hostile, "fix": hostile}}}}

	// hidden: the command does not show this string at all (the check
	// that it shows it escaped is skipped).
	type result struct {
		res    cliResult
		want   int
		hidden bool
	}
	cases := map[string]func(t *testing.T) result{
		"train allow": func(t *testing.T) result {
			url, _ := envelopeServer(t, 200, allow)
			return result{runCLI(t, cancelArgs(url, tok, ent)...), 0, false}
		},
		"train deny": func(t *testing.T) result {
			url, _ := envelopeServer(t, 403, deny)
			return result{runCLI(t, cancelArgs(url, tok, ent)...), exitDenied, false}
		},
		"status not found": func(t *testing.T) result {
			url, _ := envelopeServer(t, 404, deny)
			return result{runCLI(t, "status", "--server", url, "--token-file", tok, "--idempotency-key", "k"), exitNotFound, false}
		},
		"status bad request": func(t *testing.T) result {
			url, _ := envelopeServer(t, 400, deny)
			return result{runCLI(t, "status", "--server", url, "--token-file", tok, "--idempotency-key", "k"), exitFailed, false}
		},
		"runs get": func(t *testing.T) result {
			url, _ := envelopeServer(t, 200, map[string]any{"ok": true, "notice": hostile, "data": hostileRun(true)})
			return result{runCLI(t, "runs", "get", "run_x", "--server", url, "--token-file", tok), 0, false}
		},
		"runs get not found": func(t *testing.T) result {
			url, _ := envelopeServer(t, 404, deny)
			return result{runCLI(t, "runs", "get", "run_x", "--server", url, "--token-file", tok), exitNotFound, false}
		},
		"runs list": func(t *testing.T) result {
			url, _ := envelopeServer(t, 200, map[string]any{"ok": true, "data": map[string]any{
				"runs": []any{hostileRun(false), hostileRun(false)}, "next": hostile}})
			return result{runCLI(t, "runs", "list", "--server", url, "--token-file", tok), 0, false}
		},
		"runs list refused": func(t *testing.T) result {
			url, _ := envelopeServer(t, 400, deny)
			return result{runCLI(t, "runs", "list", "--server", url, "--token-file", tok), exitFailed, false}
		},
		"token confirmation --deposit": func(t *testing.T) result {
			url, _ := envelopeServer(t, 201, map[string]any{"ok": true, "data": map[string]any{"confirmation_ref": hostile}})
			return result{runCLI(t, "token", "confirmation", "--cost", "1.00", "--deposit", "--server", url), 0, false}
		},
		"token confirmation --deposit refused": func(t *testing.T) result {
			url, _ := envelopeServer(t, 403, deny)
			return result{runCLI(t, "token", "confirmation", "--cost", "1.00", "--deposit", "--server", url), exitOther, false}
		},
		"demo": func(t *testing.T) result {
			url, _ := envelopeServer(t, 403, deny)
			return result{runCLI(t, "demo", "--server", url), exitDemoFail, false}
		},
		"ticket verify ok": func(t *testing.T) result {
			f := hostileTicket(t, dir, func(c *ticket.Claims) {
				c.RunID, c.BookingID, c.Account, c.GPUType, c.Region, c.ID = hostile, hostile, hostile, hostile, hostile, hostile
			})
			return result{runCLI(t, "ticket", "verify", "--jwks", f.jwks, "--issuer", trust.DevTicketIssuer, f.good), 0, false}
		},
		"ticket verify mismatch": func(t *testing.T) result {
			f := hostileTicket(t, dir, func(c *ticket.Claims) { c.RunID, c.ID = hostile, hostile })
			return result{runCLI(t, "ticket", "verify", "--jwks", f.jwks, "--issuer", trust.DevTicketIssuer,
				"--run-id", "run_other", f.good), ticketExitMismatch, false}
		},
		"ticket verify --online withdrawn": func(t *testing.T) result {
			f := hostileTicket(t, dir, nil)
			url, _ := envelopeServer(t, 403, deny)
			return result{runCLI(t, "ticket", "verify", "--jwks", f.jwks, "--issuer", trust.DevTicketIssuer, "--online",
				"--server", url, "--token-file", tok, f.good), ticketExitWithdrawn, false}
		},
		"ticket verify --online live": func(t *testing.T) result {
			f := hostileTicket(t, dir, nil)
			url, _ := envelopeServer(t, 200, map[string]any{"ok": true, "data": map[string]any{"live": true, "state": hostile,
				"job_id": hostile}})
			return result{runCLI(t, "ticket", "verify", "--jwks", f.jwks, "--issuer", trust.DevTicketIssuer, "--online",
				"--server", url, "--token-file", tok, "--job-id", "slurm-1", f.good), 0, false}
		},
		"ticket renew refused": func(t *testing.T) result {
			url, _ := envelopeServer(t, 403, deny)
			return result{runCLI(t, "ticket", "renew", "--server", url, "--token-file", tok, "--run-id", "run_1"), exitOther, false}
		},
		"ticket renew": func(t *testing.T) result {
			url, _ := envelopeServer(t, 200, map[string]any{"ok": true, "data": map[string]any{"run_id": "run_1",
				"ticket": hostile, "jti": "j", "expires_at": 1}})
			return result{runCLI(t, "ticket", "renew", "--server", url, "--token-file", tok, "--run-id", "run_1"), exitOther, true}
		},
		"ticket verify rejected": func(t *testing.T) result {
			f := hostileTicket(t, dir, nil)
			return result{runCLI(t, "ticket", "verify", "--jwks", f.jwks, "--issuer", hostile, f.good), ticketExitRejected, true}
		},
		"eval with a hostile bundle": func(t *testing.T) result {
			return result{runCLI(t, "eval", "--manifest", hostileNamed(t, dir, "llama3-8b.json"),
				"--bundle-dir", hostileBundleDir(t), "--deadline", patience.Deadline.String()), exitDenied, false}
		},
		// a bundle without the planner's data has no planner: plan refuses it
		// as bad input before printing anything the bundle could put there
		"plan with a hostile bundle": func(t *testing.T) result {
			return result{runCLI(t, "plan", "--manifest", hostileNamed(t, dir, "llama3-8b.json"),
				"--bundle-dir", hostileBundleDir(t), "--deadline", patience.Deadline.String()), exitFailed, true}
		},
		"eval of a missing file": func(t *testing.T) result {
			return result{runCLI(t, "eval", "--manifest", filepath.Join(dir, hostile+".json")), exitFailed, false}
		},
		"replay": func(t *testing.T) result {
			ev := map[string]any{"decision_id": hostile, "time": "2026-01-01T00:00:00Z", "account": hostile,
				"action": "train.create", "idempotency_key": hostile, "request_digest": "sha256:00", "bundle_revision": hostile,
				"result": "allow", "status": 200, "latency_seconds": 0, "policy_result": "allow", "policy_codes": []string{hostile},
				"policy_warnings": []string{hostile}, "input": map[string]any{"action": "train.create"}}
			raw, _ := json.Marshal(ev)
			log := filepath.Join(dir, "decisions.jsonl")
			writeMode(t, log, append(raw, '\n'), 0o600)
			return result{runCLI(t, "replay", "--decisions", log, "--deadline", patience.Deadline.String()), 0, false}
		},
		"sign and verify a hostile file name": func(t *testing.T) result {
			m := hostileNamed(t, dir, "llama3-8b.json")
			key := filepath.Join("..", "..", "fixtures", "keys", "dev-manifest-ecdsa.key.pem")
			pub := filepath.Join("..", "..", "fixtures", "keys", "dev-manifest-ecdsa.pub.pem")
			s := runCLI(t, "sign", "--key", key, m)
			checkInert(t, "sign", s.stdout+s.stderr)
			return result{runCLI(t, "verify", "--key", pub, m), 0, false}
		},
		"verify a manifest with a hostile field": func(t *testing.T) result {
			var doc map[string]any
			_ = json.Unmarshal(mustRead(t, filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json")), &doc)
			doc[hostile] = hostile
			raw, _ := json.Marshal(doc)
			m := filepath.Join(dir, "field.json")
			writeMode(t, m, raw, 0o600)
			key := filepath.Join("..", "..", "fixtures", "keys", "dev-manifest-ecdsa.key.pem")
			pub := filepath.Join("..", "..", "fixtures", "keys", "dev-manifest-ecdsa.pub.pem")
			if s := runCLI(t, "sign", "--key", key, m); s.exit != 0 {
				t.Fatalf("sign: %+v", s)
			}
			return result{runCLI(t, "verify", "--key", pub, m), exitVerifyFail, true}
		},
		"ledger check a hostile file name": func(t *testing.T) result {
			p := filepath.Join(dir, "l"+hostile+".db")
			writeMode(t, p, mustRead(t, boltLedger(t, false)), 0o600)
			return result{runCLI(t, "ledger", "check", "--file", p), 0, false}
		},
		"ledger restore a hostile file name": func(t *testing.T) result {
			p := filepath.Join(dir, "r"+hostile+".db")
			writeMode(t, p, mustRead(t, boltLedger(t, false)), 0o600)
			return result{runCLI(t, "ledger", "restore", "--backup", p, "--to", filepath.Join(t.TempDir(), "x"+hostile+".db"),
				"--max-confirmation-lifetime", "1h"), 0, false}
		},
		"bundle inspect a hostile file name": func(t *testing.T) result {
			p := filepath.Join(dir, "b"+hostile+".tar.gz")
			writeMode(t, p, signedPolicies(t, testNow(), "inert", false), 0o600)
			return result{runCLI(t, "bundle", "inspect", p), 0, false}
		},
	}
	for _, args := range revokeArgs(tok) {
		revoked := map[string]any{"ok": true, "notice": hostile, "data": map[string]any{"kind": hostile, "subject": hostile,
			"revoked_by": hostile, "revoked_at": 1, "expires_at": 2, "created": false}}
		cases[strings.Join(args[:2], " ")] = func(t *testing.T) result {
			url, _ := envelopeServer(t, 200, revoked)
			return result{runCLI(t, append(args, "--server", url)...), 0, false}
		}
		cases[strings.Join(args[:2], " ")+" refused"] = func(t *testing.T) result {
			url, _ := envelopeServer(t, 403, deny)
			return result{runCLI(t, append(args, "--server", url)...), exitDenied, false}
		}
	}
	evalReport := []string{"eval-report", "--run-id", "run_00000000000000000000000000", "--manifest",
		filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"), "--report-file", tok}
	posted := map[string]any{"ok": true, "notice": hostile, "data": map[string]any{"run_id": hostile, "stage": hostile,
		"verdict": "failed", "failed_evals": []string{hostile}, "report_digest": hostile, "state": hostile,
		"decision_id": hostile, "recorded_at": 1, "created": false}}
	cases["eval-report"] = func(t *testing.T) result {
		url, _ := envelopeServer(t, 200, posted)
		return result{runCLI(t, append(evalReport, "--server", url)...), 0, false}
	}
	cases["eval-report refused"] = func(t *testing.T) result {
		url, _ := envelopeServer(t, 403, deny)
		return result{runCLI(t, append(evalReport, "--server", url)...), exitDenied, false}
	}
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			r := run(t)
			if r.res.exit != r.want {
				t.Errorf("exit %d, want %d; stdout %q stderr %q", r.res.exit, r.want, r.res.stdout, r.res.stderr)
			}
			if !r.hidden && !strings.Contains(r.res.stdout+r.res.stderr, `\x1b`) && !strings.Contains(r.res.stdout+r.res.stderr, `\u001b`) {
				t.Errorf("the hostile string is not shown (escaped) at all: stdout %q stderr %q", r.res.stdout, r.res.stderr)
			}
			checkInert(t, "stdout", r.res.stdout)
			checkInert(t, "stderr", r.res.stderr)
		})
	}

	// Every runnable command is either fed hostile strings above or prints
	// nothing from outside, for the reason given.
	fed := []string{"train", "status", "runs get", "runs list", "revoke confirmation", "revoke entitlement", "revoke booking",
		"revoke caller", "token confirmation", "demo", "ticket verify", "ticket renew", "eval", "plan", "replay", "sign", "verify", "bundle inspect",
		"ledger check", "ledger restore", "eval-report"}
	mintsOnly := "prints the token it minted and times it computed; its errors go through main, inert"
	nothingFromOutside := map[string]string{
		"serve":        "logs JSON lines (slog's JSON escapes every control character); its errors go through main, inert",
		"keygen":       "prints the paths it wrote (inert) and a fingerprint it computed",
		"codes":        "prints the code list built into the binary",
		"version":      "prints the binary's own version",
		"help":         "prints the binary's own help",
		"token":        "prints its own usage error",
		"token caller": mintsOnly, "token depositor": mintsOnly, "token revoker": mintsOnly,
		"token entitlement": mintsOnly, "token eval-report": mintsOnly, "token ladder-decision": mintsOnly,
		"completion bash":       "prints the completion script",
		"completion zsh":        "prints the completion script",
		"completion fish":       "prints the completion script",
		"completion powershell": "prints the completion script",
		"":                      "prints its help",
		"bundle":                "prints its help",
		"runs":                  "prints its help",
		"revoke":                "prints its help",
		"ticket":                "prints its help",
		"ledger":                "prints its help",
		"completion":            "prints its help",
		"webhook":               "prints its help",
		"webhook config": "prints YAML built from the bundle; a name of a --bundle that is not printable ASCII is refused " +
			"(webhook.MatchConditions); its errors go through main, inert",
		"webhook policies": "prints the shipped admission policies with the bundle's controller identities; " +
			"its errors go through main, inert",
	}
	walkCommands(t, func(c *cobra.Command) {
		p := commandPath(c)
		if _, ok := nothingFromOutside[p]; !ok && !slices.Contains(fed, p) {
			t.Errorf("itogate %s: no hostile-output case and no reason it prints nothing from outside", p)
		}
	})

	// --json is the server's answer, byte for byte.
	for _, status := range []int{200, 403} {
		body := allow
		if status != 200 {
			body = deny
		}
		url, raw := envelopeServer(t, status, body)
		res := runCLI(t, cancelArgs(url, tok, ent, "--json")...)
		if res.stdout != string(raw) {
			t.Fatalf("train --json (%d): stdout %q, want the body %q", status, res.stdout, raw)
		}
	}
}

// hostileRun is a run status (api.RunStatus) with a hostile string in
// every string field, with its halt, revocation and (withEvents) events.
func hostileRun(withEvents bool) map[string]any {
	run := map[string]any{"run_id": hostile, "booking_id": hostile, "state": hostile, "stage": hostile,
		"manifest_digest": hostile, "gpus": 8, "admitted_at": 1, "live_until": 2, "ended_at": 3, "ended_by": hostile,
		"restarts": 1, "last_checkpoint_step": 500,
		"halt":       map[string]any{"at": 1, "stage": hostile, "failed_evals": []string{hostile}, "report_digest": hostile, "decision_id": hostile},
		"revocation": map[string]any{"at": 1, "kind": hostile, "subject": hostile, "reason": hostile}}
	if withEvents {
		run["events"] = []any{map[string]any{"at": 1, "to": hostile, "action": hostile, "decision_id": hostile,
			"reason": hostile, "stage": hostile, "checkpoint_step": 500}}
	}
	return run
}

// hostileNamed copies a fixture manifest to a file whose name is hostile.
func hostileNamed(t *testing.T, dir, fixture string) string {
	t.Helper()
	p := filepath.Join(dir, "m"+strings.ReplaceAll(hostile, "/", "_")+fixture)
	writeMode(t, p, mustRead(t, filepath.Join("..", "..", "fixtures", "manifests", fixture)), 0o600)
	return p
}

// hostileTicket issues a ticket with the claims edit makes.
func hostileTicket(t *testing.T, dir string, edit func(*ticket.Claims)) ticketFixture {
	t.Helper()
	ts, err := trust.Dev()
	if err != nil {
		t.Fatal(err)
	}
	c := testTicketClaims(testNow())
	if edit != nil {
		edit(&c)
	}
	raw, err := ts.Tickets.Issue(c)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := os.MkdirTemp(dir, "ticket")
	if err != nil {
		t.Fatal(err)
	}
	f := ticketFixture{jwks: filepath.Join(sub, "jwks.json"), good: filepath.Join(sub, "t.jws")}
	writeMode(t, f.jwks, ts.Tickets.JWKS(), 0o600)
	writeMode(t, f.good, []byte(raw), 0o600)
	return f
}

// hostileBundleDir writes a bundle directory whose decision denies with
// hostile codes, gates, messages, fixes, warnings and estimates.
func hostileBundleDir(t *testing.T) string {
	t.Helper()
	h, _ := json.Marshal(hostile)
	finding := `{"code": ` + string(h) + `, "gate": ` + string(h) + `, "message": ` + string(h) + `, "fix": ` + string(h) + `}`
	files := bundletest.Decision()
	files["ito/admission/admission.rego"] = "package ito.admission\n\ndecision := {\"allow\": false, \"violations\": [" + finding +
		"], \"warnings\": [" + finding + "], \"estimates\": {" + string(h) + ": " + string(h) + ", \"world_size\": " + string(h) +
		", \"fix_layout\": {\"nodes\": " + string(h) + ", \"changes\": [" + string(h) + "]}}}\n"
	dir := filepath.Join(t.TempDir(), "bundle")
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		writeMode(t, p, []byte(content), 0o600)
	}
	return dir
}
