package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
)

// cliLife drives a run's life through the real command line against a real
// development server: tokens are minted with the scenario's development
// keys and written to files, every request goes through itogate train,
// runs and revoke.
type cliLife struct {
	t          *testing.T
	ctx        context.Context
	url, dir   string
	r          *scenario.Runner
	m          scenario.Manifest // the curriculum (pretrain → long_context → sft)
	mPath, sig string            // its file and signature file
	digest     string
	caller     string // caller token file
}

func newCLILife(t *testing.T) *cliLife {
	t.Helper()
	url, _ := startServe(t, &serveOptions{}, true)
	r, _ := scenarioFor(t, url, "llama3-8b")
	m, err := r.Curriculum()
	if err != nil {
		t.Fatal(err)
	}
	l := &cliLife{t: t, ctx: context.Background(), url: url, dir: t.TempDir(), r: r, m: m, digest: manifest.Digest(m.Raw)}
	l.mPath, l.sig = l.file("curriculum.json", string(m.Raw)), l.file("curriculum.sig", m.Signature)
	tok, err := r.CallerToken()
	if err != nil {
		t.Fatal(err)
	}
	l.caller = l.file("caller.jwt", tok)
	return l
}

// file writes exactly content to a new 0600 file of the fixture and
// returns its path.
func (l *cliLife) file(name, content string) string {
	l.t.Helper()
	p := filepath.Join(l.dir, name)
	writeMode(l.t, p, []byte(content), 0o600)
	return p
}

// ent writes a fresh entitlement for m (tweak may change its claims).
func (l *cliLife) ent(m scenario.Manifest, tweak func(map[string]any)) string {
	l.t.Helper()
	tok, err := l.r.EntitlementFor(m, tweak)
	if err != nil {
		l.t.Fatal(err)
	}
	return l.file("ent-"+scenario.Account+"-"+l.r.Key("e")+".jwt", tok)
}

// confirm deposits a confirmation of act and returns its ref.
func (l *cliLife) confirm(act, digest, cost, runID string) string {
	l.t.Helper()
	ref, err := l.r.Confirm(l.ctx, act, digest, cost, runID)
	if err != nil {
		l.t.Fatal(err)
	}
	return ref
}

// train runs itogate train --json with the caller token, entitlement file
// ent, a fresh idempotency key and ref, then args; it wants exit code and
// returns the envelope it printed.
func (l *cliLife) train(what string, exit int, ent, ref string, args ...string) api.Envelope[api.AdmissionData] {
	l.t.Helper()
	line := append([]string{"train", "--server", l.url, "--token-file", l.caller, "--entitlement-file", ent,
		"--booking", scenario.Booking, "--confirmation-ref", ref, "--idempotency-key", l.r.Key("cli"), "--json"}, args...)
	res := runCLI(l.t, line...)
	var env api.Envelope[api.AdmissionData]
	if err := json.Unmarshal([]byte(res.stdout), &env); err != nil || res.exit != exit {
		l.t.Fatalf("%s: exit %d, want %d\nstdout %q\nstderr %q", what, res.exit, exit, res.stdout, res.stderr)
	}
	return env
}

// create admits the curriculum through the CLI and returns its run id.
func (l *cliLife) create() string {
	l.t.Helper()
	run, _ := l.createKeyed()
	return run
}

// createKeyed is create that also returns the create's idempotency key.
func (l *cliLife) createKeyed() (run, key string) {
	l.t.Helper()
	cost, _ := l.m.Doc["budget"].(map[string]any)["ceiling_usd"].(string)
	env := l.train("create", 0, l.ent(l.m, nil), l.confirm("train.create", l.digest, cost, ""),
		"--manifest", l.mPath, "--signature", l.sig)
	if env.Data.State != api.StateAdmitted || env.Data.RunID == "" {
		l.t.Fatalf("create: %+v", env)
	}
	return env.Data.RunID, env.Data.IdempotencyKey
}

// restart admits (or wants refused with code) a restart of run from step.
func (l *cliLife) restart(run string, step int64, exit int, code api.Code) {
	l.t.Helper()
	ref, err := l.r.ConfirmRestart(l.ctx, run, step)
	if err != nil {
		l.t.Fatal(err)
	}
	env := l.train("restart", exit, l.ent(l.m, nil), ref, "--action", "train.restart", "--run-id", run,
		"--checkpoint-step", itoa(step))
	l.wantAnswer("restart from "+itoa(step), env, api.StateRestartAdmitted, code)
}

// wantAnswer: env allows with state (code "") or is refused with code.
func (l *cliLife) wantAnswer(what string, env api.Envelope[api.AdmissionData], state api.AdmissionState, code api.Code) {
	l.t.Helper()
	switch {
	case code == "" && (!env.OK || env.Data.State != state):
		l.t.Fatalf("%s: %+v, want state %s", what, env, state)
	case code != "" && (env.Error == nil || env.Error.Code != code):
		l.t.Fatalf("%s: %+v, want %s", what, env, code)
	}
}

// run asks itogate runs get RUN --json and returns the run.
func (l *cliLife) run(run string) api.RunStatus {
	l.t.Helper()
	res := runCLI(l.t, "runs", "get", run, "--server", l.url, "--token-file", l.caller, "--json")
	var env api.Envelope[api.RunStatus]
	if err := json.Unmarshal([]byte(res.stdout), &env); err != nil || res.exit != 0 {
		l.t.Fatalf("runs get %s: exit %d, stdout %q, stderr %q", run, res.exit, res.stdout, res.stderr)
	}
	return env.Data
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestTrainEveryActionThroughCLI: every action of the API is admitted
// through itogate train against a real server, each with its own flags: a
// create, a stage advance with an eval report, a restart with its
// checkpoint step (refused locally without it, its confirmation unspent),
// a cancel, a cleanup, a create on custom data with a ladder decision and
// a booking release; runs get and runs list show each outcome.
func TestTrainEveryActionThroughCLI(t *testing.T) {
	l := newCLILife(t)
	run := l.create()
	l.advance(run)
	l.restartNeedsItsStep(run)
	l.cancel(run)
	l.cleanup()
	l.ladderCreate()
	l.release()
}

// advance moves run from pretrain to long_context with the eval report of
// pretrain, read from a file.
func (l *cliLife) advance(run string) {
	l.t.Helper()
	report, err := l.r.EvalReport(run, "pretrain", l.digest, "ito-battery-pretrain-2026.10",
		map[string]float64{"mmlu_5shot": 0.31, "hellaswag_acc": 0.42})
	if err != nil {
		l.t.Fatal(err)
	}
	env := l.train("advance", 0, l.ent(l.m, nil), l.confirm("train.stage.advance", "", "0.00", run),
		"--action", "train.stage.advance", "--run-id", run, "--stage", "long_context",
		"--manifest", l.mPath, "--signature", l.sig, "--eval-report", l.file("pretrain.jws", report))
	l.wantAnswer("advance", env, api.StateStageAdvanced, "")
	if st := l.run(run); st.State != api.RunLive || st.Stage != "long_context" {
		l.t.Fatalf("after the advance: state %s, stage %s", st.State, st.Stage)
	}
}

// restartNeedsItsStep: a restart without --checkpoint-step, or with a flag
// a restart does not take, is refused before anything is sent (exit 4,
// CLIENT_INPUT_INVALID); its confirmation then restarts the run from step
// 500, which the run records.
func (l *cliLife) restartNeedsItsStep(run string) {
	l.t.Helper()
	ref, err := l.r.ConfirmRestart(l.ctx, run, 500)
	if err != nil {
		l.t.Fatal(err)
	}
	ent := l.ent(l.m, nil)
	env := l.train("restart without its step", exitFailed, ent, ref, "--action", "train.restart", "--run-id", run)
	if env.Error == nil || env.Error.Code != api.CodeClientInput || !strings.Contains(env.Error.Message, "--checkpoint-step is required for train.restart") {
		l.t.Fatalf("restart without its step: %+v", env.Error)
	}
	env = l.train("restart with a stage", exitFailed, ent, ref, "--action", "train.restart", "--run-id", run,
		"--checkpoint-step", "500", "--stage", "sft")
	if env.Error == nil || !strings.Contains(env.Error.Message, "--stage is not a flag of train.restart") {
		l.t.Fatalf("restart with a stage: %+v", env.Error)
	}
	if st := l.run(run); st.Restarts != 0 {
		l.t.Fatalf("a refused command line restarted the run: %+v", st)
	}
	env = l.train("restart", 0, ent, ref, "--action", "train.restart", "--run-id", run, "--checkpoint-step", "500")
	l.wantAnswer("restart", env, api.StateRestartAdmitted, "")
	if st := l.run(run); st.Restarts != 1 || st.LastCheckpointStep == nil || *st.LastCheckpointStep != 500 {
		l.t.Fatalf("after the restart: %d restarts, last from %v", st.Restarts, st.LastCheckpointStep)
	}
}

// cancel ends run; a restart of it is then denied RUN_NOT_LIVE (exit 2).
func (l *cliLife) cancel(run string) {
	l.t.Helper()
	env := l.train("cancel", 0, l.ent(l.m, nil), l.confirm("train.cancel", "", "0.00", run),
		"--action", "train.cancel", "--run-id", run)
	l.wantAnswer("cancel", env, api.StateCancelAdmitted, "")
	if st := l.run(run); st.State != api.RunCancelled || st.EndedBy != api.TrainCancel {
		l.t.Fatalf("after the cancel: state %s, ended by %q", st.State, st.EndedBy)
	}
	l.restart(run, 1000, exitDenied, "RUN_NOT_LIVE")
}

// cleanup ends a new run with train.cleanup.
func (l *cliLife) cleanup() {
	l.t.Helper()
	run := l.create()
	env := l.train("cleanup", 0, l.ent(l.m, nil), l.confirm("train.cleanup", "", "0.00", run),
		"--action", "train.cleanup", "--run-id", run)
	l.wantAnswer("cleanup", env, api.StateCleanupAdmitted, "")
	if st := l.run(run); st.State != api.RunCleanedUp {
		l.t.Fatalf("after the cleanup: state %s", st.State)
	}
}

// ladderCreate: a large run on a custom dataset is denied
// DATA_LADDER_DECISION_MISSING without a ladder decision (exit 2, the
// confirmation unspent) and admitted with one minted by itogate token
// ladder-decision and sent with --ladder-decision.
func (l *cliLife) ladderCreate() {
	l.t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(l.m.Raw, &doc); err != nil {
		l.t.Fatal(err)
	}
	// 2 000 steps of 64 × 8 192 tokens: 1.05e9 tokens, a large run
	// (datachecks' ladder_required_from_tokens is 1e9).
	doc["objective"].(map[string]any)["max_steps"] = 2000
	dataset := "sha256:" + strings.Repeat("ab", 32)
	d := doc["data"].([]any)[0].(map[string]any)
	d["uri"], d["digest"] = "s3://acme-data/custom-web-2026-10/", dataset
	d["dedup"] = map[string]any{"method": "minhash-lsh", "ratio": 0.02, "report_digest": "sha256:" + strings.Repeat("cd", 32)}
	raw, _ := json.MarshalIndent(doc, "", "  ")
	m, err := l.r.SignManifest(raw)
	if err != nil {
		l.t.Fatal(err)
	}
	mPath, sig := l.file("custom.json", string(raw)), l.file("custom.sig", m.Signature)
	cost, _ := doc["budget"].(map[string]any)["ceiling_usd"].(string)
	ref, ent := l.confirm("train.create", manifest.Digest(m.Raw), cost, ""), l.ent(m, nil)
	env := l.train("custom data without a ladder decision", exitDenied, ent, ref, "--manifest", mPath, "--signature", sig)
	if env.Error == nil || len(env.Error.Violations) != 1 || env.Error.Violations[0].Code != "DATA_LADDER_DECISION_MISSING" {
		l.t.Fatalf("custom data without a ladder decision: %+v", env.Error)
	}
	tok := runCLI(l.t, "token", "ladder-decision", "--dataset-digest", dataset)
	if tok.exit != 0 {
		l.t.Fatalf("token ladder-decision: %+v", tok)
	}
	env = l.train("custom data with a ladder decision", 0, ent, ref, "--manifest", mPath, "--signature", sig,
		"--ladder-decision", l.file("ladder.jws", strings.TrimSpace(tok.stdout)))
	l.wantAnswer("custom data with a ladder decision", env, api.StateAdmitted, "")
}

// release releases the booking: its live runs end released, as runs list
// --state released shows (and its human output names the run).
func (l *cliLife) release() {
	l.t.Helper()
	run := l.create()
	env := l.train("release", 0, l.ent(l.m, nil), l.confirm("booking.release", "", "0.00", ""), "--action", "booking.release")
	l.wantAnswer("release", env, api.StateReleaseAdmitted, "")
	res := runCLI(l.t, "runs", "list", "--server", l.url, "--token-file", l.caller, "--state", "released", "--json")
	var list api.Envelope[api.RunList]
	if err := json.Unmarshal([]byte(res.stdout), &list); err != nil || res.exit != 0 {
		l.t.Fatalf("runs list: exit %d, stdout %q", res.exit, res.stdout)
	}
	found := false
	for _, r := range list.Data.Runs {
		found = found || r.RunID == run
		if r.State != api.RunReleased {
			l.t.Errorf("runs list --state released lists %s in state %s", r.RunID, r.State)
		}
	}
	if !found {
		l.t.Fatalf("runs list --state released lacks %s: %+v", run, list.Data)
	}
	res = runCLI(l.t, "runs", "list", "--server", l.url, "--token-file", l.caller, "--booking", scenario.Booking, "--limit", "1")
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if res.exit != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "RUN_ID") || !strings.HasPrefix(lines[2], "next page: --page-token run_") {
		l.t.Fatalf("runs list --limit 1: exit %d, stdout %q", res.exit, res.stdout)
	}
	next := strings.TrimPrefix(lines[2], "next page: --page-token ")
	res = runCLI(l.t, "runs", "list", "--server", l.url, "--token-file", l.caller, "--page-token", next, "--json")
	if err := json.Unmarshal([]byte(res.stdout), &list); err != nil || res.exit != 0 || len(list.Data.Runs) == 0 || list.Data.Runs[0].RunID == next {
		l.t.Fatalf("runs list --page-token: exit %d, stdout %q", res.exit, res.stdout)
	}
}

// TestRevokeEveryKindThroughCLI: each kind of revocation through itogate
// revoke against a real server, with its own identity read from a file:
// a confirmation by ref (again: already revoked) and by jti, an
// entitlement and a booking (the restart and advance of their live runs
// are then denied with the revocation code, exit 7, and runs get says
// revoked; cancel stays admissible), and a caller key (its requests are
// refused, exit 7).
func TestRevokeEveryKindThroughCLI(t *testing.T) {
	l := newCLILife(t)
	rev, err := l.r.RevokerToken()
	if err != nil {
		t.Fatal(err)
	}
	desk, err := l.r.DepositorToken()
	if err != nil {
		t.Fatal(err)
	}
	l.revokeConfirmation(l.file("desk.jwt", desk), l.file("revoker.jwt", rev))
	l.revokeEntitlement(l.file("revoker.jwt", rev))
	l.revokeBooking(l.file("revoker.jwt", rev))
	l.revokeCaller(l.file("revoker.jwt", rev))
}

// revoke runs itogate revoke KIND with args against the server and wants
// exit; it returns stdout.
func (l *cliLife) revoke(exit int, kind string, args ...string) string {
	l.t.Helper()
	res := runCLI(l.t, append([]string{"revoke", kind, "--server", l.url}, args...)...)
	if res.exit != exit {
		l.t.Fatalf("revoke %s %v: exit %d, want %d\nstdout %q\nstderr %q", kind, args, res.exit, exit, res.stdout, res.stderr)
	}
	return res.stdout
}

// inAnHour is an --expires-at an hour ahead, in RFC 3339.
func inAnHour() string { return testNow().Add(time.Hour).Format(time.RFC3339) }

func (l *cliLife) revokeConfirmation(desk, revoker string) {
	l.t.Helper()
	cost, _ := l.m.Doc["budget"].(map[string]any)["ceiling_usd"].(string)
	ref := l.confirm("train.create", l.digest, cost, "")
	if out := l.revoke(exitUnauthenticated, "confirmation", "--depositor-token-file", revoker, "--ref", ref); !strings.Contains(out, "DEPOSITOR_UNAUTHENTICATED") {
		l.t.Fatalf("the revoker revokes a confirmation: %q", out)
	}
	out := l.revoke(0, "confirmation", "--depositor-token-file", desk, "--ref", ref, "--reason", "desk withdrew it")
	if !strings.HasPrefix(out, "REVOKED  kind=confirmation  subject=") {
		l.t.Fatalf("revoke confirmation: %q", out)
	}
	if out = l.revoke(0, "confirmation", "--depositor-token-file", desk, "--ref", ref); !strings.HasPrefix(out, "ALREADY REVOKED  kind=confirmation") {
		l.t.Fatalf("revoke confirmation again: %q", out)
	}
	env := l.train("create with a revoked confirmation", exitRevoked, l.ent(l.m, nil), ref, "--manifest", l.mPath, "--signature", l.sig)
	l.wantAnswer("create with a revoked confirmation", env, "", api.CodeConfirmationRevoked)

	if out = l.revoke(exitFailed, "confirmation", "--depositor-token-file", desk, "--jti", "jti_cli"); out != "" {
		l.t.Fatalf("--jti without --expires-at printed %q", out)
	}
	l.revoke(0, "confirmation", "--depositor-token-file", desk, "--jti", "jti_cli", "--expires-at", inAnHour())
	l.revoke(exitNotFound, "confirmation", "--depositor-token-file", desk, "--ref", "cfr_"+strings.Repeat("0", 32))
}

// revokeEntitlement: the run admitted under a revoked entitlement is
// revoked: its restart is denied ENTITLEMENT_REVOKED (a fresh entitlement
// does not help), its cancel is admitted.
func (l *cliLife) revokeEntitlement(revoker string) {
	l.t.Helper()
	cost, _ := l.m.Doc["budget"].(map[string]any)["ceiling_usd"].(string)
	env := l.train("create", 0, l.ent(l.m, func(c map[string]any) { c["jti"] = "ent_cli_revoked" }),
		l.confirm("train.create", l.digest, cost, ""), "--manifest", l.mPath, "--signature", l.sig)
	run := env.Data.RunID
	out := l.revoke(0, "entitlement", "--revoker-token-file", revoker, "--jti", "ent_cli_revoked", "--expires-at", inAnHour())
	if !strings.HasPrefix(out, "REVOKED  kind=entitlement  subject=ent_cli_revoked\n") {
		l.t.Fatalf("revoke entitlement: %q", out)
	}
	l.restart(run, 500, exitRevoked, api.CodeEntitlementRevoked)
	if st := l.run(run); st.State != api.RunRevoked || st.Revocation == nil || st.Revocation.Kind != "entitlement" || st.Restarts != 0 {
		l.t.Fatalf("after the entitlement's revocation: %+v", st)
	}
	env = l.train("cancel", 0, l.ent(l.m, nil), l.confirm("train.cancel", "", "0.00", run), "--action", "train.cancel", "--run-id", run)
	l.wantAnswer("cancel of a revoked run", env, api.StateCancelAdmitted, "")
}

// revokeBooking: a revoked booking's live run may not advance nor restart
// (exit 7, ENTITLEMENT_REVOKED); runs get and the create's status by key
// say revoked.
func (l *cliLife) revokeBooking(revoker string) {
	l.t.Helper()
	run, key := l.createKeyed()
	l.revoke(0, "booking", "--revoker-token-file", revoker, "--booking", scenario.Booking, "--expires-at", inAnHour(), "--reason", "withdrawn")
	report, err := l.r.EvalReport(run, "pretrain", l.digest, "ito-battery-pretrain-2026.10",
		map[string]float64{"mmlu_5shot": 0.31, "hellaswag_acc": 0.42})
	if err != nil {
		l.t.Fatal(err)
	}
	env := l.train("advance on a revoked booking", exitRevoked, l.ent(l.m, nil), l.confirm("train.stage.advance", "", "0.00", run),
		"--action", "train.stage.advance", "--run-id", run, "--stage", "long_context",
		"--manifest", l.mPath, "--signature", l.sig, "--eval-report", l.file("pretrain-2.jws", report))
	l.wantAnswer("advance on a revoked booking", env, "", api.CodeEntitlementRevoked)
	l.restart(run, 500, exitRevoked, api.CodeEntitlementRevoked)
	if st := l.run(run); st.State != api.RunRevoked || st.Stage != "pretrain" || st.Restarts != 0 ||
		st.Revocation == nil || st.Revocation.Kind != "booking" {
		l.t.Fatalf("after the booking's revocation: %+v", st)
	}
	res := runCLI(l.t, "status", "--server", l.url, "--token-file", l.caller, "--idempotency-key", key, "--json")
	var env2 api.Envelope[api.AdmissionData]
	if err := json.Unmarshal([]byte(res.stdout), &env2); err != nil || res.exit != 0 ||
		env2.Data.RunID != run || env2.Data.RunState != api.RunRevoked {
		l.t.Fatalf("status of the create after the booking's revocation: exit %d, %q", res.exit, res.stdout)
	}
}

// revokeCaller: a withdrawn caller key's requests are refused (exit 7).
func (l *cliLife) revokeCaller(revoker string) {
	l.t.Helper()
	l.revoke(0, "caller", "--revoker-token-file", revoker, "--key-id", keys.Dev().Caller.KeyID, "--expires-at", inAnHour())
	res := runCLI(l.t, "runs", "list", "--server", l.url, "--token-file", l.caller)
	if res.exit != exitRevoked || !strings.Contains(res.stdout, "CALLER_REVOKED") {
		l.t.Fatalf("runs list with a revoked caller key: exit %d, stdout %q", res.exit, res.stdout)
	}
}
