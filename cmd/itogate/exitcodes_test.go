package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/ledger/bolt"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/internal/patience"
)

// walkCommands calls fn for every command of the tree newRootCmd builds,
// the root included.
func walkCommands(t *testing.T, fn func(c *cobra.Command)) int {
	t.Helper()
	n := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		n++
		fn(c)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(&bytes.Buffer{}, &bytes.Buffer{}))
	if n < 25 {
		t.Fatalf("walked %d commands", n)
	}
	return n
}

// TestExitTableIsWellFormed: every group names commands of the tree, no
// command is in two groups, and each group has one code of success, one of
// bad input, one for any other failure, each code once.
func TestExitTableIsWellFormed(t *testing.T) {
	paths := map[string]bool{}
	walkCommands(t, func(c *cobra.Command) { paths[commandPath(c)] = true })
	named := map[string]bool{}
	others := 0
	for _, g := range exitTable {
		if g.commands == nil {
			others++
		}
		for _, p := range g.commands {
			if !paths[p] {
				t.Errorf("exit table names %q, no command of the tree", p)
			}
			if named[p] {
				t.Errorf("%q is in two groups", p)
			}
			named[p] = true
		}
		codes := map[int]bool{}
		for _, k := range []exitKind{kindOK, kindBadInput, kindOther} {
			n := 0
			for _, r := range g.rows {
				if r.kind&k != 0 {
					n++
				}
			}
			if n != 1 {
				t.Errorf("group %q: %d rows of kind %d, want 1", groupName(g), n, k)
			}
		}
		for _, r := range g.rows {
			if codes[r.code] {
				t.Errorf("group %q: code %d twice", groupName(g), r.code)
			}
			codes[r.code] = true
			if r.meaning == "" {
				t.Errorf("group %q: code %d has no meaning", groupName(g), r.code)
			}
		}
	}
	if others != 1 {
		t.Fatalf("%d groups for every other command, want 1", others)
	}
}

// TestFlagTypoExitsBadInput: on every command of the tree, an unknown flag
// exits with the command's bad-input code from the table (not 1), names
// the flag on stderr, prints nothing on stdout and runs nothing (serve
// starts no server, train sends nothing: no server is given).
func TestFlagTypoExitsBadInput(t *testing.T) {
	var paths []string
	walkCommands(t, func(c *cobra.Command) { paths = append(paths, commandPath(c)) })
	for _, p := range paths {
		args := append(strings.Fields(p), "--no-such-flag")
		res := runCLI(t, args...)
		want := exitCodeOf(p, kindBadInput)
		if res.exit != want || res.stdout != "" || !strings.Contains(res.stderr, "unknown flag: --no-such-flag") {
			t.Errorf("itogate %s: exit %d, stdout %q, stderr %q; want exit %d naming the flag",
				strings.Join(args, " "), res.exit, res.stdout, res.stderr, want)
		}
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"no-such-command"}, `unknown command "no-such-command"`},
		{[]string{"bundle", "no-such-command"}, `unknown command "no-such-command" for "itogate bundle"`},
		{[]string{"ticket", "no-such-command"}, `unknown command "no-such-command" for "itogate ticket"`},
		{[]string{"token"}, "name the kind of token"},
		{[]string{"token", "no-such-kind"}, `unknown command "no-such-kind" for "itogate token"`},
		{[]string{"codes", "extra"}, `unknown command "extra" for "itogate codes"`},
		{[]string{"sign", "a", "b"}, "accepts 1 arg(s), received 2"},
		{[]string{"eval"}, `required flag(s) "manifest" not set`},
		{[]string{"train", "--timeout", "soon"}, `invalid argument "soon" for "--timeout"`},
		{[]string{"ticket", "verify", "a", "b"}, "accepts at most 1 arg(s), received 2"},
		{[]string{"ticket", "verify", "--world-size", "many"}, `invalid argument "many" for "--world-size"`},
	} {
		path := ""
		for i := range tc.args {
			if _, ok := commandByPath(t, strings.Join(tc.args[:i+1], " ")); ok {
				path = strings.Join(tc.args[:i+1], " ")
			}
		}
		res := runCLI(t, tc.args...)
		if want := exitCodeOf(path, kindBadInput); res.exit != want || !strings.Contains(res.stderr, tc.says) {
			t.Errorf("itogate %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), res.exit, res.stderr, want, tc.says)
		}
	}
}

// commandByPath finds the command at path in a fresh tree.
func commandByPath(t *testing.T, path string) (*cobra.Command, bool) {
	t.Helper()
	var found *cobra.Command
	walkCommands(t, func(c *cobra.Command) {
		if commandPath(c) == path {
			found = c
		}
	})
	return found, found != nil
}

// TestExitCodesPerCommand: every row of every named group happens through
// the real command line with its code, for every command of the group; the
// group of every other command has each of its rows shown on one command
// (and its bad-input code on every command by TestFlagTypoExitsBadInput).
// A row with no case here fails the test.
func TestExitCodesPerCommand(t *testing.T) {
	dir := t.TempDir()
	tok, ent := exitClientFiles(t)
	manifestOK := filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json")
	manifestDeny := filepath.Join("..", "..", "fixtures", "manifests", "llama2-70b-v100-fsdp.json")
	key := filepath.Join("..", "..", "fixtures", "keys", "dev-manifest-ecdsa.key.pem")
	pub := filepath.Join("..", "..", "fixtures", "keys", "dev-manifest-ecdsa.pub.pem")
	otherPub := filepath.Join("..", "..", "fixtures", "keys", "dev-caller.pub.pem")
	signed := filepath.Join(dir, "m.json")
	writeMode(t, signed, mustRead(t, manifestOK), 0o600)
	if res := runCLI(t, "sign", "--key", key, signed); res.exit != 0 {
		t.Fatalf("sign: %+v", res)
	}
	tf := newTicketFixture(t)
	flipLog := filepath.Join(dir, "flip.jsonl")
	writeMode(t, flipLog, []byte(`{"decision_id":"dec_flip","time":"2026-01-01T00:00:00Z","account":"a","action":"train.create",`+
		`"idempotency_key":"k","request_digest":"sha256:00","bundle_revision":"r","result":"allow","status":200,"latency_seconds":0,`+
		`"policy_result":"allow","policy_warnings":[],"input":{"action":"train.create"}}`+"\n"), 0o600)
	bundlePath := filepath.Join(dir, "bundle.tar.gz")
	writeMode(t, bundlePath, signedPolicies(t, testNow(), "exit", false), 0o600)
	notBundle := filepath.Join(dir, "not-a-bundle.tar.gz")
	writeMode(t, notBundle, []byte("not gzip"), 0o600)
	keygenDir := t.TempDir()
	deadline := "--deadline=" + patience.Deadline.String()

	stubbed := func(status int, code string, args ...string) func(t *testing.T) cliResult {
		return func(t *testing.T) cliResult {
			s := newStub(t, status, code)
			return runCLI(t, append(args, "--server", s.srv.URL)...)
		}
	}
	train := func(status int, code string) func(t *testing.T) cliResult {
		return func(t *testing.T) cliResult {
			s := newStub(t, status, code)
			return runCLI(t, cancelArgs(s.srv.URL, tok, ent)...)
		}
	}
	status := func(status int, code string) func(t *testing.T) cliResult {
		return stubbed(status, code, "status", "--token-file", tok, "--idempotency-key", "k1")
	}
	cli := func(args ...string) func(t *testing.T) cliResult {
		return func(t *testing.T) cliResult { return runCLI(t, args...) }
	}
	dead := func(args ...string) func(t *testing.T) cliResult {
		return func(t *testing.T) cliResult {
			return runCLI(t, append(args, "--server", "http://"+freeAddr(t), "--timeout", "5s")...)
		}
	}
	// unit runs exitStatus on what a command returns when the command line
	// cannot make it happen: no replay fails but for bad input, and serve
	// stops with 0 only on a signal.
	unit := func(path string, err error) func(t *testing.T) cliResult {
		return func(t *testing.T) cliResult {
			c, ok := commandByPath(t, path)
			if !ok {
				t.Fatalf("no command %q", path)
			}
			code, msg := exitStatus(c, err)
			return cliResult{exit: code, stderr: msg}
		}
	}

	cases := map[string]func(t *testing.T) cliResult{
		"train 0": train(200, ""), "train 1": train(300, "MULTIPLE_CHOICES"),
		"train 2": train(403, "CONFIRMATION_REPLAYED"), "train 3": train(404, "ADMISSION_NOT_FOUND"),
		"train 4": train(400, "REQUEST_INVALID"), "train 5": train(503, "LEDGER_UNAVAILABLE"),
		"train 6": train(401, "CALLER_UNAUTHENTICATED"), "train 7": train(403, "CONFIRMATION_REVOKED"),
		"status 0": status(200, ""), "status 1": status(300, "MULTIPLE_CHOICES"),
		"status 2": status(409, "IDEMPOTENCY_KEY_CONFLICT"), "status 3": status(404, "ADMISSION_NOT_FOUND"),
		"status 4": status(400, "REQUEST_INVALID"), "status 5": dead("status", "--token-file", tok, "--idempotency-key", "k1"),
		"status 6": status(401, "CALLER_UNAUTHENTICATED"), "status 7": status(401, "CALLER_REVOKED"),

		"ticket verify 0": cli(append(tf.args(), tf.good)...),
		"ticket verify 1": cli(append(tf.args(), tf.altered)...),
		"ticket verify 2": cli(append(tf.args(), "--pem", tf.pem)...),
		"ticket verify 3": cli(append(tf.args(), "--run-id", "run_other", tf.good)...),
		"ticket verify 4": stubbed(403, "ENTITLEMENT_REVOKED", append(tf.args(), "--online", "--token-file", tok, tf.good)...),
		"ticket verify 5": stubbed(503, "LEDGER_UNAVAILABLE", append(tf.args(), "--online", "--token-file", tok, tf.good)...),

		"eval 0": cli("eval", "--manifest", manifestOK, deadline),
		"eval 1": cli("eval", "--manifest", manifestOK, "--deadline", "1ns"),
		"eval 2": cli("eval", "--manifest", manifestDeny, deadline),
		"eval 4": cli("eval", "--manifest", manifestOK, "--held-gpus", "-1"),

		"plan 0": cli("plan", "--manifest", manifestOK, deadline),
		"plan 1": cli("plan", "--manifest", manifestOK, "--deadline", "1ns"),
		"plan 2": cli("plan", "--manifest", filepath.Join("..", "..", "fixtures", "manifests", "llama3-405b.json"), "--nodes", "1", deadline),
		"plan 4": cli("plan", "--manifest", manifestOK, "--nodes", "-1"),

		"replay 0": cli("replay", "--decisions", flipLog, deadline),
		"replay 1": cli("replay", "--decisions", flipLog, "--fail-on-flip", deadline),
		"replay 3": unit("replay", errors.New("any failure but bad input")),
		"replay 4": cli("replay", "--decisions", filepath.Join(dir, "missing.jsonl")),
		"replay 5": cli("replay", "--decisions", flipLog, "--fail-on-flip", "--deadline", "1ns"),

		"verify 0": cli("verify", "--key", pub, signed),
		"verify 1": cli("verify", "--key", otherPub, signed),
		"verify 4": cli("verify", "--key", filepath.Join(dir, "missing.pem"), signed),

		"bundle inspect 0": cli("bundle", "inspect", bundlePath),
		"bundle inspect 1": cli("bundle", "inspect", notBundle),
		"bundle inspect 4": cli("bundle", "inspect", "--key-id", "k", bundlePath),

		"demo 0": func(t *testing.T) cliResult {
			url, _ := startServe(t, &serveOptions{}, true)
			return runCLI(t, "demo", "--server", url)
		},
		"demo 1": func(t *testing.T) cliResult {
			s := newStub(t, 503, "LEDGER_UNAVAILABLE")
			return runCLI(t, "demo", "--server", s.srv.URL)
		},
		"demo 4": cli("demo", "extra-argument"),

		"ledger check 0": func(t *testing.T) cliResult {
			return runCLI(t, "ledger", "check", "--file", boltLedger(t, false))
		},
		"ledger check 1": func(t *testing.T) cliResult {
			return runCLI(t, "ledger", "check", "--file", boltLedger(t, true))
		},
		"ledger check 3": func(t *testing.T) cliResult {
			path := boltLedger(t, false)
			s, err := bolt.Open(path, bolt.Options{}) // a running server's lock
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			return runCLI(t, "ledger", "check", "--file", path)
		},
		"ledger check 4": cli("ledger", "check"),

		"serve 0": unit("serve", nil),
		"serve 1": cli("serve", "--listen", "0.0.0.0:0", "--data-dir", dir),
		"serve 4": cli("serve", "--listen"),

		"codes 0":  cli("codes"),
		"keygen 1": cli("keygen", "--name", "dup", "--dir", keygenDir),
		"token 4":  cli("token", "caller", "--ttl", "-1s"),
	}
	// The runs and revoke commands: each row from a stub's answer (runs
	// 1: a 403, which no runs command documents, is "any other"), 5 from a
	// server nothing listens on.
	for _, args := range [][]string{{"runs", "get", "run_x", "--token-file", tok}, {"runs", "list", "--token-file", tok}} {
		p := strings.Join(args[:2], " ")
		cases[p+" 0"], cases[p+" 1"] = stubbed(200, "", args...), stubbed(403, "EVAL_FAILED", args...)
		cases[p+" 3"], cases[p+" 4"] = stubbed(404, "RUN_STATUS_NOT_FOUND", args...), stubbed(400, "REQUEST_INVALID", args...)
		cases[p+" 5"], cases[p+" 6"] = dead(args...), stubbed(401, "CALLER_UNAUTHENTICATED", args...)
		cases[p+" 7"] = stubbed(401, "CALLER_REVOKED", args...)
	}
	for _, args := range revokeArgs(tok) {
		p := strings.Join(args[:2], " ")
		cases[p+" 0"], cases[p+" 1"] = stubbed(200, "", args...), stubbed(300, "MULTIPLE_CHOICES", args...)
		cases[p+" 2"], cases[p+" 3"] = stubbed(403, "REVOKER_UNAUTHORIZED", args...), stubbed(404, "REVOCATION_REF_NOT_FOUND", args...)
		cases[p+" 4"], cases[p+" 5"] = stubbed(400, "REQUEST_INVALID", args...), dead(args...)
		cases[p+" 6"] = stubbed(401, "REVOKER_UNAUTHENTICATED", args...)
	}
	// The eval authority's post: each row from a stub's answer, 5 from a
	// server nothing listens on (the caller token file stands in for the
	// report: the stub verifies nothing).
	report := []string{"eval-report", "--run-id", "run_00000000000000000000000000", "--manifest", manifestOK,
		"--report-file", tok}
	cases["eval-report 0"], cases["eval-report 1"] = stubbed(201, "", report...), stubbed(300, "MULTIPLE_CHOICES", report...)
	cases["eval-report 2"], cases["eval-report 3"] = stubbed(403, "RUN_HALTED", report...), stubbed(404, "RUN_STATUS_NOT_FOUND", report...)
	cases["eval-report 4"], cases["eval-report 5"] = stubbed(400, "REQUEST_INVALID", report...), dead(report...)
	cases["eval-report 6"] = stubbed(401, "EVAL_REPORT_UNAUTHENTICATED", report...)
	cases["eval-report 7"] = stubbed(403, "ENTITLEMENT_REVOKED", report...)
	// keygen 1 needs a key pair already there.
	if res := runCLI(t, "keygen", "--name", "dup", "--dir", keygenDir); res.exit != 0 {
		t.Fatalf("keygen: %+v", res)
	}

	seen := map[string]bool{}
	for _, g := range exitTable {
		commands := g.commands
		for _, r := range g.rows {
			if g.commands == nil {
				// Every other command: one case per row, any command.
				commands = nil
				for name := range cases {
					if code := name[strings.LastIndexByte(name, ' ')+1:]; code == fmt.Sprint(r.code) &&
						exitGroupOf(name[:strings.LastIndexByte(name, ' ')]).commands == nil {
						commands = append(commands, name[:strings.LastIndexByte(name, ' ')])
					}
				}
				if len(commands) == 0 {
					t.Errorf("no case for code %d of every other command", r.code)
				}
			}
			for _, p := range commands {
				name := fmt.Sprintf("%s %d", p, r.code)
				seen[name] = true
				run, ok := cases[name]
				if !ok {
					t.Errorf("no case for %q (%s)", name, r.meaning)
					continue
				}
				t.Run(name, func(t *testing.T) {
					if res := run(t); res.exit != r.code {
						t.Errorf("exit %d, want %d (%s)\nstdout %q\nstderr %q", res.exit, r.code, r.meaning, res.stdout, res.stderr)
					}
				})
			}
		}
	}
	for name := range cases {
		if !seen[name] {
			t.Errorf("case %q is no row of the exit table", name)
		}
	}
}

// TestExitCodeTablesInDocs: the README's and docs/tickets.md's exit-code
// tables are the table in code, rendered (ITOGATE_UPDATE_DOCS=1 rewrites
// them), and the README shows every group.
func TestExitCodeTablesInDocs(t *testing.T) {
	shown := map[string]bool{}
	for _, doc := range []string{"README.md", filepath.Join("docs", "tickets.md")} {
		path := filepath.Join("..", "..", doc)
		raw := mustRead(t, path)
		got, names, err := renderExitBlocks(raw)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if doc == "README.md" {
			for _, n := range names {
				shown[n] = true
			}
		}
		if !bytes.Equal(got, raw) {
			if os.Getenv("ITOGATE_UPDATE_DOCS") == "1" {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			t.Errorf("%s: the exit-code tables differ from the table in cmd/itogate/exitcodes.go; "+
				"run ITOGATE_UPDATE_DOCS=1 go test ./cmd/itogate -run TestExitCodeTablesInDocs", doc)
		}
	}
	for _, g := range exitTable {
		if !shown[groupName(g)] {
			t.Errorf("README.md shows no exit-code table for %q", groupName(g))
		}
	}
}

// TestRenderExitBlocks: a block is replaced by its group's table, text
// around it is kept, a marker naming no group is an error.
func TestRenderExitBlocks(t *testing.T) {
	doc := "before\n" + exitBlockStart + "ticket verify -->\nstale\n" + exitBlockEnd + "\nafter\n"
	got, names, err := renderExitBlocks([]byte(doc))
	want := "before\n" + exitBlockStart + "ticket verify -->\n" + renderExitTable(exitGroupOf("ticket verify")) + exitBlockEnd + "\nafter\n"
	if err != nil || string(got) != want || !slices.Equal(names, []string{"ticket verify"}) {
		t.Fatalf("got %q, %v, %v\nwant %q", got, names, err, want)
	}
	if _, _, err := renderExitBlocks([]byte(exitBlockStart + "nothing -->\n" + exitBlockEnd)); err == nil {
		t.Fatal("a block naming no group was rendered")
	}
	if _, _, err := renderExitBlocks([]byte(exitBlockStart + "eval -->\nno end")); err == nil {
		t.Fatal("an unclosed block was rendered")
	}
}

// ticketFixture is a valid and an altered ticket with the JWKS and PEM
// that verify them.
type ticketFixture struct {
	jwks, pem, good, altered string
}

func newTicketFixture(t *testing.T) ticketFixture {
	t.Helper()
	ts, err := trust.Dev()
	if err != nil {
		t.Fatal(err)
	}
	raw := issueTestTicket(t, ts)
	dir := t.TempDir()
	f := ticketFixture{jwks: filepath.Join(dir, "jwks.json"), pem: filepath.Join(dir, "t.pub.pem"),
		good: filepath.Join(dir, "good.jws"), altered: filepath.Join(dir, "altered.jws")}
	writeMode(t, f.jwks, ts.Tickets.JWKS(), 0o600)
	writeMode(t, f.pem, []byte("not a key"), 0o600)
	writeMode(t, f.good, []byte(raw+"\n"), 0o600)
	b := []byte(raw)
	b[len(b)/2] ^= 0x02
	writeMode(t, f.altered, b, 0o600)
	return f
}

func (f ticketFixture) args() []string {
	return []string{"ticket", "verify", "--jwks", f.jwks, "--issuer", trust.DevTicketIssuer}
}

// revokeArgs are a command line of each revoke subcommand with its
// credential file tok (no --server).
func revokeArgs(tok string) [][]string {
	exp := "--expires-at=2099-01-01T00:00:00Z"
	return [][]string{
		{"revoke", "confirmation", "--depositor-token-file", tok, "--ref", "cfr_" + strings.Repeat("0", 32)},
		{"revoke", "entitlement", "--revoker-token-file", tok, "--jti", "jti_1", exp},
		{"revoke", "booking", "--revoker-token-file", tok, "--booking", "bk_1", exp},
		{"revoke", "caller", "--revoker-token-file", tok, "--key-id", "kid_1", exp},
	}
}
