package main

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/inert"
	"github.com/itocompute/itogate/gatekeeper/safefile"
)

// The exit codes of every command, in one table: main maps errors through
// it, the README's and docs/tickets.md's exit-code tables are rendered from
// it (TestExitCodeTablesInDocs), and TestExitCodesPerCommand makes every
// row happen through the real command line.

// exitKind is what main needs to know of a row: whether it is the code of
// success, of bad input (the command line — an unknown flag, a bad value, a
// missing argument — or a file or value refused before anything was done),
// of any other failure, or a code the command returns itself
// (exitError).
type exitKind uint8

const (
	kindOK       exitKind = 1 << iota // success
	kindBadInput                      // command line, refused file or value
	kindOther                         // any failure without a code of its own
	kindOwn                           // returned by the command as exitError
)

type exitRow struct {
	code    int
	kind    exitKind
	meaning string
	todo    string
}

// exitGroup is the rows of one or more commands, named by their path
// without "itogate " ("train", "ticket verify"); the group whose commands
// list is empty holds every command not named in another.
type exitGroup struct {
	commands []string
	rows     []exitRow
}

// Exit codes returned by the commands themselves (exitError).
const (
	exitDenied          = 2 // train, status, revoke: 403 or 409
	exitNotFound        = 3 // status, runs get, revoke: 404
	exitFailed          = 4 // bad input, every command but ticket verify
	exitUnavailable     = 5 // train, status, runs, revoke: no definite answer
	exitUnauthenticated = 6 // train, status, runs, revoke: 401
	exitRevoked         = 7 // train, status, runs: a revoked credential

	exitOther       = 1 // any other failure, every command but replay and ticket verify
	exitReplayFlip  = 1 // replay --fail-on-flip: a decision flips
	exitReplayOther = 3 // replay: any other failure (1 is a flip)
	// replay: the candidate could not evaluate a decision (a timeout after
	// its retry, an evaluation error): the report is incomplete
	exitReplayUnevaluated = 5
	exitVerifyFail        = 1 // verify: the manifest is not accepted
	exitDemoFail          = 1 // demo: a case differs
	exitLedgerOther       = 3 // ledger check: the ledger could not be read (1 is inconsistent)

	ticketExitOK          = 0
	ticketExitRejected    = 1 // the ticket does not verify
	ticketExitUsage       = 2 // bad flags, unreadable key or ticket
	ticketExitMismatch    = 3 // verifies, but not for what this runtime expects
	ticketExitWithdrawn   = 4 // --online: the run may not take this job
	ticketExitUnavailable = 5 // --online: no answer from itogate
)

var exitTable = []exitGroup{
	{[]string{"train", "status"}, []exitRow{
		{0, kindOK, "allowed (train) / the admission is stored (status)", "create the run"},
		{exitOther, kindOther, "unexpected internal error, or an answer of no status it knows (1xx, 3xx)", "report it"},
		{exitDenied, kindOwn, "denied: 403 policy or ledger deny, 409 idempotency key bound to another request", "read the codes and fixes"},
		{exitNotFound, kindOwn, "status only: nothing was admitted under the key (404 `ADMISSION_NOT_FOUND`)", "retry the admission with the same key"},
		{exitFailed, kindBadInput, "bad input: a flag or argument (an unknown flag included), a refused file: nothing sent; or 400/413/415 from the server", "fix the named flag, file or field"},
		{exitUnavailable, kindOwn, "unavailable or no definite answer: 503, 408, 429, transport failure, `--timeout` passed, an answer that is not an envelope", "ask `itogate status` with the same key, then retry"},
		{exitUnauthenticated, kindOwn, "unauthenticated: 401 `CALLER_UNAUTHENTICATED`", "get a current caller token"},
		{exitRevoked, kindOwn, "revoked: `CALLER_REVOKED`, `CONFIRMATION_REVOKED`, `ENTITLEMENT_REVOKED`", "stop: no retry helps; get a new credential"},
	}},
	{[]string{"runs get", "runs list"}, []exitRow{
		{0, kindOK, "the run (get) or a page of runs (list)", ""},
		{exitOther, kindOther, "unexpected internal error, or an answer these commands do not expect (1xx, 3xx, 403, 409)", "report it"},
		{exitNotFound, kindOwn, "get only: no run with this id for your account (404 `RUN_STATUS_NOT_FOUND`; another account's run answers the same)", "check the run id and the caller's account"},
		{exitFailed, kindBadInput, "bad input: a flag or argument, a refused token file: nothing sent; or 400 from the server", "fix the named flag, file or field"},
		{exitUnavailable, kindOwn, "unavailable or no definite answer: 503, 408, 429, transport failure, `--timeout` passed, an answer that is not an envelope", "ask again (they only read)"},
		{exitUnauthenticated, kindOwn, "unauthenticated: 401 `CALLER_UNAUTHENTICATED`", "get a current caller token"},
		{exitRevoked, kindOwn, "revoked: `CALLER_REVOKED`", "stop: get a new caller key"},
	}},
	{[]string{"revoke confirmation", "revoke entitlement", "revoke booking", "revoke caller"}, []exitRow{
		{0, kindOK, "revoked: stored now (201), or already revoked (200, the stored revocation)", ""},
		{exitOther, kindOther, "unexpected internal error, or an answer these commands do not expect (1xx, 3xx, 409)", "report it"},
		{exitDenied, kindOwn, "refused: 403 `REVOKER_UNAUTHORIZED` (this identity may not revoke this kind)", "revoke as the identity of the kind"},
		{exitNotFound, kindOwn, "confirmation `--ref` only: no confirmation is deposited under the ref (404 `REVOCATION_REF_NOT_FOUND`)", "revoke by `--jti` with `--expires-at`"},
		{exitFailed, kindBadInput, "bad input: a flag (`--expires-at` included), a refused token file: nothing sent; or 400/413/415 from the server", "fix the named flag, file or field"},
		{exitUnavailable, kindOwn, "unavailable or no definite answer: 503, 408, 429, transport failure, `--timeout` passed, an answer that is not an envelope", "send it again (a revocation is idempotent)"},
		{exitUnauthenticated, kindOwn, "unauthenticated: 401 `REVOKER_UNAUTHENTICATED` or `DEPOSITOR_UNAUTHENTICATED` (or no revoker identity is configured)", "get a current revoker or depositor token"},
	}},
	{[]string{"eval-report"}, []exitRow{
		{0, kindOK, "recorded: the report halted the run (HALTED) or its stage's passing report is recorded (PASSED); 201, or 200 for the same report again", ""},
		{exitOther, kindOther, "unexpected internal error, or an answer this command does not expect (1xx, 3xx)", "report it"},
		{exitDenied, kindOwn, "refused: 403 or 409, nothing written: the report does not bind to the run's stage, manifest or battery (`EVAL_REPORT_BINDING_MISMATCH`, `RUN_MANIFEST_MISMATCH`), or the run takes no report (`RUN_HALTED`, `EVAL_REPORT_OVERDUE`, `RUN_NOT_LIVE`, `RUN_STAGE_CONFLICT`)", "post a report of the run's current stage; a halted or ended run takes none"},
		{exitNotFound, kindOwn, "no run with this id (404 `RUN_STATUS_NOT_FOUND`)", "check --run-id against the report's run_id"},
		{exitFailed, kindBadInput, "bad input: a flag, a refused manifest or report file: nothing sent; or 400/413/415 from the server", "fix the named flag, file or field"},
		{exitUnavailable, kindOwn, "unavailable or no definite answer: 503, 408, 429, transport failure, `--timeout` passed, an answer that is not an envelope", "post the same report again (it gets the same answer)"},
		{exitUnauthenticated, kindOwn, "the report does not verify: 401 `EVAL_REPORT_UNAUTHENTICATED` (forged, expired, another purpose's key, or no eval authority configured)", "post the report exactly as the eval authority signed it, before it expires"},
		{exitRevoked, kindOwn, "the run was revoked with its entitlement or booking (`ENTITLEMENT_REVOKED`): it takes no report", "nothing to post: the run only tears down"},
	}},
	{[]string{"ticket verify"}, []exitRow{
		{ticketExitOK, kindOK, "verifies and meets every expectation; prints the claims (`--json`: as JSON)", "start the job"},
		{ticketExitRejected, kindOwn, "does not verify: forged, altered (one changed byte is enough), expired, another `typ`/`iss`/`aud`, a claim missing", "refuse the job"},
		{ticketExitUsage, kindBadInput | kindOther, "usage: a bad flag or argument (an unknown flag included), a key or ticket file refused or unreadable", "fix the installation (fail closed: refuse the job)"},
		{ticketExitMismatch, kindOwn, "verifies, but names another run, booking, account or topology than expected", "refuse the job"},
		{ticketExitWithdrawn, kindOwn, "`--online`: withdrawn: the run is revoked (`ENTITLEMENT_REVOKED`), halted (`RUN_HALTED`) or ended (`RUN_NOT_LIVE`), the ticket expired (`TICKET_EXPIRED`: renew it) or its run is bound to another job (`TICKET_JOB_BOUND`)", "refuse the job"},
		{ticketExitUnavailable, kindOwn, "`--online`: no answer from itogate: unreachable, 401, 5xx, `--timeout` passed", "refuse the job (fail closed); check the scheduler token and itogate"},
	}},
	{[]string{"eval"}, []exitRow{
		{0, kindOK, "the policy allows", ""},
		{exitOther, kindOther, "the policy could not be evaluated (an evaluation error, `--deadline` passed)", "report it, or raise --deadline"},
		{exitDenied, kindOwn, "the policy denies; the violations and fixes are printed", "apply the fixes"},
		{exitFailed, kindBadInput, "bad input: a flag or argument, a refused or invalid manifest, claims file or bundle directory", "fix the named flag or file"},
	}},
	{[]string{"plan"}, []exitRow{
		{0, kindOK, "at least one proposed layout is admitted; the plans are printed", ""},
		{exitOther, kindOther, "the policy could not be evaluated (an evaluation error, `--deadline` passed)", "report it, or raise --deadline"},
		{exitDenied, kindOwn, "no proposed layout is admitted on this hardware; with `--entitlement`, the entitlement gate's violations of the manifest itself are printed (`ENTITLEMENT_TELEMETRY_MALFORMED`, `ENTITLEMENT_TELEMETRY_STALE`, …: the codes `eval` denies it with)", "change the hardware flags, the global batch or the budget; or fix the entitlement"},
		{exitFailed, kindBadInput, "bad input: a flag or argument, a refused or invalid manifest, claims file or bundle directory", "fix the named flag or file"},
	}},
	{[]string{"replay"}, []exitRow{
		{0, kindOK, "replayed: the candidate evaluated every replayable decision (nothing flips, or no `--fail-on-flip`)", ""},
		{exitReplayFlip, kindOwn, "`--fail-on-flip`: a decision flips (allow → deny, deny → allow, or its codes or warnings change)", "review the flips before shipping the bundle"},
		{exitReplayOther, kindOther, "the replay failed otherwise", "report it"},
		{exitFailed, kindBadInput, "bad input: a flag or argument, a refused decision log, bundle directory or archive (unsigned, forged, altered), a bundle that does not compile", "fix the named flag or file"},
		{exitReplayUnevaluated, kindOwn, "could not evaluate: the candidate produced no decision for some logged decision (`POLICY_TIMEOUT` after its retry, `POLICY_EVALUATION_FAILED`, …); listed apart from the flips, never counted as one; wins over 1", "read the listed errors; fix the bundle, or raise `--deadline` on a loaded machine"},
	}},
	{[]string{"verify"}, []exitRow{
		{0, kindOK, "the signature verifies with a given key and the schema accepts the manifest", ""},
		{exitVerifyFail, kindOwn | kindOther, "FAIL: the signature does not verify with the given keys, or the schema refuses the manifest", "do not use the manifest"},
		{exitFailed, kindBadInput, "bad input: a flag or argument, a refused or unreadable manifest, key or signature file", "fix the named flag or file"},
	}},
	{[]string{"bundle inspect"}, []exitRow{
		{0, kindOK, "the bundle verifies and compiles as the server would activate it", ""},
		{exitOther, kindOther, "the bundle fails: limits, entries, signature, manifest, age or compilation", "do not ship it"},
		{exitFailed, kindBadInput, "bad input: a flag or argument, a refused archive or key file", "fix the named flag or file"},
	}},
	{[]string{"demo"}, []exitRow{
		{0, kindOK, "every admission case answered as expected", ""},
		{exitDemoFail, kindOwn | kindOther, "a case differs, or the server could not be started or reached", "read the table and the server log"},
		{exitFailed, kindBadInput, "bad input: a flag or argument", "fix it"},
	}},
	{[]string{"ledger check"}, []exitRow{
		{0, kindOK, "the ledger is consistent; the counts are printed", ""},
		{exitLedgerInconsistent, kindOwn, "INCONSISTENT: an invariant is broken; the first problems are printed", "stop the server; restore the last backup that checks consistent"},
		{exitLedgerOther, kindOther, "the ledger could not be read: the file is locked by a running server, missing or of another schema; the database is unreachable", "check a backup instead, or fix the named cause"},
		{exitFailed, kindBadInput, "bad input: a flag or argument, a refused file, no `$ITOGATE_LEDGER_DSN`", "fix the named flag, file or variable"},
	}},
	{[]string{"serve"}, []exitRow{
		{0, kindOK, "stopped on SIGINT or SIGTERM after draining", ""},
		{exitOther, kindOther, "could not start (a configuration refused included) or failed", "read the log line"},
		{exitFailed, kindBadInput, "bad command line: an unknown flag, a bad flag value, an argument", "fix it"},
	}},
	{nil, []exitRow{
		{0, kindOK, "done", ""},
		{exitOther, kindOther, "failed (a deposit refused, a file that exists, a write that failed …)", "read the message"},
		{exitFailed, kindBadInput, "bad input: a flag or argument (an unknown flag or kind included), a refused or invalid file", "fix the named flag or file"},
	}},
}

// exitGroupOf is the group of the command at path ("ticket verify").
func exitGroupOf(path string) exitGroup {
	var rest exitGroup
	for _, g := range exitTable {
		if g.commands == nil {
			rest = g
		}
		if slices.Contains(g.commands, path) {
			return g
		}
	}
	return rest
}

// exitCodeOf is the code of kind k for the command at path.
func exitCodeOf(path string, k exitKind) int {
	for _, r := range exitGroupOf(path).rows {
		if r.kind&k != 0 {
			return r.code
		}
	}
	panic("exit table: no row of kind " + fmt.Sprint(k) + " for " + path)
}

// commandPath is c's path without the root's name: "ticket verify".
func commandPath(c *cobra.Command) string {
	p := c.CommandPath()
	if i := strings.IndexByte(p, ' '); i >= 0 {
		return p[i+1:]
	}
	return ""
}

// usageError is a command-line error: an unknown or malformed flag, a
// wrong argument, a missing required flag. It exits with the command's
// bad-input code.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// inputError is bad input found by the command itself: a value or file it
// refuses before doing anything.
type inputError struct{ err error }

func (e inputError) Error() string { return e.err.Error() }
func (e inputError) Unwrap() error { return e.err }

// badInput marks err as bad input (nil stays nil).
func badInput(err error) error {
	if err == nil {
		return nil
	}
	return inputError{err}
}

// isBadInput: a usage error, an error marked bad input, or a file the safe
// reader refused.
func isBadInput(err error) bool {
	var ue usageError
	var ie inputError
	var fe *safefile.Error
	return errors.As(err, &ue) || errors.As(err, &ie) || errors.As(err, &fe)
}

// exitStatus maps what the command c returned to the process exit code, and
// the message main prints on stderr ("" when the command printed its own).
func exitStatus(c *cobra.Command, err error) (int, string) {
	if err == nil {
		return 0, ""
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code, ""
	}
	path := ""
	if c != nil {
		path = commandPath(c)
	}
	msg := "itogate: " + inert.Text(err.Error())
	var ue usageError
	if errors.As(err, &ue) || (c != nil && !c.Runnable()) {
		return exitCodeOf(path, kindBadInput), msg + "\n" + `run "` + strings.TrimSpace("itogate "+path) + ` --help" for usage`
	}
	if isBadInput(err) {
		return exitCodeOf(path, kindBadInput), msg
	}
	return exitCodeOf(path, kindOther), msg
}

// markUsageErrors makes every command-line error of the tree a usageError:
// flag parsing (every command's FlagErrorFunc), and, for each runnable
// command, its arguments, required flags and flag groups (checked together
// before the command runs; cobra would check the last two after).
func markUsageErrors(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		inner := c.FlagErrorFunc()
		c.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
			if err = inner(c, err); err == nil {
				return nil
			}
			return usageError{err}
		})
		if !c.Runnable() && c.HasSubCommands() {
			// A group (itogate, bundle, ticket, completion): its help when
			// alone, an unknown command otherwise (cobra would print the
			// help of a group other than the root and exit 0).
			c.Args = func(c *cobra.Command, a []string) error {
				if len(a) > 0 {
					return usageError{fmt.Errorf("unknown command %q for %q", a[0], c.CommandPath())}
				}
				return nil
			}
			c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		} else if c.Runnable() && (c.Args != nil || !c.HasSubCommands()) {
			args := c.Args
			if args == nil {
				args = cobra.ArbitraryArgs
			}
			c.Args = func(c *cobra.Command, a []string) error {
				if err := args(c, a); err != nil {
					return usageError{err}
				}
				if err := c.ValidateRequiredFlags(); err != nil {
					return usageError{err}
				}
				if err := c.ValidateFlagGroups(); err != nil {
					return usageError{err}
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// renderExitTable is the Markdown of a group's table.
func renderExitTable(g exitGroup) string {
	var b strings.Builder
	b.WriteString("| exit | meaning | what to do |\n|---|---|---|\n")
	for _, r := range g.rows {
		fmt.Fprintf(&b, "| %d | %s | %s |\n", r.code, r.meaning, r.todo)
	}
	return b.String()
}

// exitBlockStart opens a rendered table in a Markdown file: the marker
// names the group's commands ("<!-- exit-codes: train, status -->", or
// "(every other command)"); exitBlockEnd closes it.
const (
	exitBlockStart = "<!-- exit-codes: "
	exitBlockEnd   = "<!-- /exit-codes -->"
	otherCommands  = "every other command"
)

func groupName(g exitGroup) string {
	if g.commands == nil {
		return otherCommands
	}
	return strings.Join(g.commands, ", ")
}

// renderExitBlocks rewrites every exit-code block of doc with the table of
// the group its marker names, and returns the names of the groups it
// rendered. A marker naming no group is an error.
func renderExitBlocks(doc []byte) ([]byte, []string, error) {
	var out bytes.Buffer
	var names []string
	rest := doc
	for {
		i := bytes.Index(rest, []byte(exitBlockStart))
		if i < 0 {
			out.Write(rest)
			return out.Bytes(), names, nil
		}
		lineEnd := bytes.Index(rest[i:], []byte(" -->\n"))
		if lineEnd < 0 {
			return nil, nil, errors.New("exit-codes marker without \" -->\"")
		}
		name := string(rest[i+len(exitBlockStart) : i+lineEnd])
		end := bytes.Index(rest[i:], []byte(exitBlockEnd))
		if end < 0 {
			return nil, nil, fmt.Errorf("exit-codes block %q not closed", name)
		}
		var group *exitGroup
		for k := range exitTable {
			if groupName(exitTable[k]) == name {
				group = &exitTable[k]
			}
		}
		if group == nil {
			return nil, nil, fmt.Errorf("exit-codes block %q names no group of the table", name)
		}
		out.Write(rest[:i+lineEnd+len(" -->\n")])
		out.WriteString(renderExitTable(*group))
		out.WriteString(exitBlockEnd)
		names = append(names, name)
		rest = rest[i+end+len(exitBlockEnd):]
	}
}
