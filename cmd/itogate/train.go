package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/client"
	"github.com/itocompute/itogate/gatekeeper/inert"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/safefile"
)

// revokedCodes end the client at once (exit 7): the credential will not
// become valid by trying again.
var revokedCodes = map[api.Code]bool{
	api.CodeCallerRevoked: true, api.CodeConfirmationRevoked: true, api.CodeEntitlementRevoked: true,
}

// bearerSource is the identity a client command acts as: the flag of the
// file its bearer token is read from, the environment variable read without
// it, and what the token is, for messages.
type bearerSource struct{ flag, env, what string }

// The identities of the client commands.
var (
	callerBearer    = bearerSource{"token-file", "ITOGATE_TOKEN", "caller token"}
	revokerBearer   = bearerSource{"revoker-token-file", "ITOGATE_REVOKER_TOKEN", "revoker token"}
	depositorBearer = bearerSource{"depositor-token-file", "ITOGATE_DEPOSITOR_TOKEN", "depositor token"}
)

type connOptions struct {
	src            *secretSource // set when the command runs
	bearer         bearerSource  // the caller's unless set before bind
	server         string
	tokenFile      string
	timeout        time.Duration
	connectTimeout time.Duration
	jsonOut        bool
	// retryHint ends the message of a transport failure: what to do
	// before trying again (default: ask itogate status).
	retryHint string
}

func (c *connOptions) bind(cmd *cobra.Command) {
	if c.bearer == (bearerSource{}) {
		c.bearer = callerBearer
	}
	cmd.Flags().StringVar(&c.server, "server", "", "itogate base URL (default $ITOGATE_URL, else "+defaultServer+")")
	cmd.Flags().StringVar(&c.tokenFile, c.bearer.flag, "", "file holding the "+c.bearer.what+" (a bearer JWT), - for standard input (default $"+c.bearer.env+")")
	readsFile(cmd.Flags(), c.bearer.flag)
	cmd.Flags().DurationVar(&c.timeout, "timeout", 30*time.Second,
		"overall deadline of the command, every attempt and status lookup included (exit 5 when it passes)")
	cmd.Flags().DurationVar(&c.connectTimeout, "connect-timeout", 3*time.Second, "bound on establishing one connection")
	cmd.Flags().BoolVar(&c.jsonOut, "json", false,
		"print the response envelope unchanged on stdout; local refusals and transport failures print one too")
}

func (c *connOptions) validate() error {
	if c.timeout <= 0 || c.connectTimeout <= 0 {
		return errors.New("--timeout and --connect-timeout must be positive")
	}
	if c.connectTimeout > c.timeout {
		return errors.New("--connect-timeout must not exceed --timeout")
	}
	return nil
}

func (c *connOptions) client() (*client.Client, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	server, err := serverURL(c.server, c.src.getenv)
	if err != nil {
		return nil, err
	}
	bearer, err := c.src.read(c.bearer.flag, c.tokenFile, c.bearer.env, c.bearer.what)
	if err != nil {
		return nil, err
	}
	return client.New(client.Options{BaseURL: server, Bearer: bearer, Timeout: c.timeout, ConnectTimeout: c.connectTimeout})
}

// withDeadline bounds the whole command by --timeout.
func (c *connOptions) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, c.timeout)
}

// localErr reports a refusal the client made itself: with --json an
// envelope on stdout, else "itogate: CODE: message" on stderr.
func (c *connOptions) localErr(stdout, stderr io.Writer, code api.Code, msg string, exit int) error {
	if c.jsonOut {
		b, _ := json.Marshal(api.Envelope[any]{Error: &api.ErrorBody{Code: code, Message: msg}})
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintf(stderr, "itogate: %s: %s\n", inert.Text(string(code)), inert.Text(msg))
	}
	return exitError{exit}
}

// inputErr is localErr for bad input: the code of a typed file error
// (safefile), else CLIENT_INPUT_INVALID.
func (c *connOptions) inputErr(stdout, stderr io.Writer, err error) error {
	code := api.CodeClientInput
	var fe *safefile.Error
	if errors.As(err, &fe) && fe.Code != "" {
		code = fe.Code
	}
	return c.localErr(stdout, stderr, code, err.Error(), exitFailed)
}

// transportErr is localErr for a request with no definite answer.
func (c *connOptions) transportErr(ctx context.Context, stdout, stderr io.Writer, err error) error {
	code := api.CodeClientTransport
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		code = api.CodeClientTimeout
	}
	hint := c.retryHint
	if hint == "" {
		hint = "the outcome is unknown: ask itogate status with the same idempotency key before retrying"
	}
	return c.localErr(stdout, stderr, code, err.Error()+"; "+hint, exitUnavailable)
}

type trainOptions struct {
	conn            connOptions
	action          string
	booking         string
	manifestPath    string
	signaturePath   string
	entitlementFile string
	confirmationRef string
	idempotencyKey  string
	runID           string
	releaseBooking  bool
	stage           string
	checkpointStep  int64
	evalReports     []string
	ladderDecisions []string
}

// trainFlag is a flag of itogate train that only some actions take. Which
// ones take it, and whether it is then required, follow from the action's
// row of the one action table (api.ActionSpec): a flag the action does not
// take is refused, a required one missing is refused, both before anything
// is read or sent.
type trainFlag struct {
	name     string
	takes    func(api.ActionSpec) bool
	required bool
}

// trainFlags are the action-dependent flags of itogate train.
var trainFlags = []trainFlag{
	{"manifest", func(s api.ActionSpec) bool { return s.Manifest }, true},
	{"signature", func(s api.ActionSpec) bool { return s.Manifest }, false},
	{"run-id", func(s api.ActionSpec) bool { return s.Action.ActsOnRun() }, true},
	{"stage", func(s api.ActionSpec) bool { return s.Stage }, true},
	// A restart names its step: 0 is a step, so the flag must be given
	// (without it a restart would silently restart from step 0).
	{"checkpoint-step", func(s api.ActionSpec) bool { return s.CheckpointStep }, true},
	// Eval-authority tokens: the eval report of the stage a stage advance
	// leaves, the ladder decisions a create carries for custom datasets.
	{"eval-report", func(s api.ActionSpec) bool { return s.EvalReports && s.Stage }, false},
	{"ladder-decision", func(s api.ActionSpec) bool { return s.EvalReports && s.Effect == api.EffectCreateRun }, false},
	{"release-booking", func(s api.ActionSpec) bool { return s.ReleasesBooking }, false},
}

// checkActionFlags refuses an unknown action, a flag the action does not
// take and a missing required one. changed says whether a flag was given.
func checkActionFlags(action api.Action, changed func(string) bool) error {
	spec, ok := action.Spec()
	if !ok {
		return fmt.Errorf("--action %q: not an action; the actions are %s", string(action), api.ActionNames())
	}
	for _, f := range trainFlags {
		switch takes := f.takes(spec); {
		case takes && f.required && !changed(f.name):
			return fmt.Errorf("--%s is required for %s", f.name, action)
		case !takes && changed(f.name):
			return fmt.Errorf("--%s is not a flag of %s: it is for %s", f.name, action, api.ActionsWhere(f.takes))
		}
	}
	return nil
}

// actionUsage lists each action with its summary and the flags it takes
// (required ones bare, optional ones in brackets), from trainFlags.
func actionUsage() string {
	var b strings.Builder
	for _, spec := range api.Actions() {
		fmt.Fprintf(&b, "  %s: %s\n   ", spec.Action, spec.Summary)
		n := 0
		for _, f := range trainFlags {
			if !f.takes(spec) {
				continue
			}
			flag := "--" + f.name
			if v := trainFlagValue[f.name]; v != "" {
				flag += " " + v
			}
			if !f.required {
				flag = "[" + flag + "]"
			}
			b.WriteString(" " + flag)
			n++
		}
		if n == 0 {
			b.WriteString(" (no flag of its own)")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// trainFlagValue names the value of an action-dependent flag in the usage
// ("" for a boolean); "..." marks a repeatable one.
var trainFlagValue = map[string]string{
	"manifest": "FILE", "signature": "FILE", "run-id": "RUN", "stage": "STAGE", "checkpoint-step": "N",
	"eval-report": "FILE...", "ladder-decision": "FILE...", "release-booking": "",
}

func newTrainCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &trainOptions{}
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Ask itogate to admit a training run (or a lifecycle action)",
		Long: `Ask itogate to admit a training run before creating it, or an action on
its life (--action): every action of the API, each with its own flags.

` + actionUsage() + `
Every action takes --booking, --confirmation-ref, --idempotency-key and the
entitlement (--entitlement-file or $ITOGATE_ENTITLEMENT); a flag the action
does not take, or a required one missing, is refused before anything is sent.

The manifest is read safely (no symlinks anywhere in the path, regular file,
owned by you or root, not group/world writable, at most 1 MiB) and exactly the
bytes read are hashed and sent; so are the eval reports and ladder decisions
(files holding one eval-authority token each, at most 16 in all). After an
ambiguous transport failure the client asks for the status of its idempotency
key before retrying, so a lost response never admits twice.

Exit status: 0 allowed, 2 denied, 4 bad input, 5 unavailable or no definite
answer (ask status first), 6 unauthenticated, 7 revoked credential (stop), 1
other. With --json every outcome, local refusals included, is one envelope
on stdout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.conn.src = &secretSource{stdin: cmd.InOrStdin(), getenv: os.Getenv}
			return o.run(cmd.Context(), cmd.Flags().Changed, stdout, stderr)
		},
	}
	o.conn.bind(cmd)
	f := cmd.Flags()
	f.StringVar(&o.action, "action", string(api.TrainCreate), api.ActionNames())
	f.StringVar(&o.booking, "booking", "", "booking id")
	f.StringVar(&o.manifestPath, "manifest", "", "training manifest (JSON): "+api.ActionsWhere(func(s api.ActionSpec) bool { return s.Manifest }))
	f.StringVar(&o.signaturePath, "signature", "", "detached manifest signature file (default <manifest>.sig)")
	f.StringVar(&o.entitlementFile, "entitlement-file", "", "file holding the entitlement token, - for standard input (default $ITOGATE_ENTITLEMENT)")
	f.StringVar(&o.confirmationRef, "confirmation-ref", "", "confirmation reference (cfr_…)")
	f.StringVar(&o.idempotencyKey, "idempotency-key", "", "idempotency key for this admission")
	f.StringVar(&o.runID, "run-id", "", "the run the action acts on: "+api.ActionsWhere(func(s api.ActionSpec) bool { return s.Action.ActsOnRun() }))
	f.BoolVar(&o.releaseBooking, "release-booking", false, "train.cleanup: also release the booking (needs a booking.release confirmation)")
	f.StringVar(&o.stage, "stage", "", "train.stage.advance: the stage the run moves to (the next its manifest declares)")
	f.Int64Var(&o.checkpointStep, "checkpoint-step", 0, "train.restart: the checkpoint step the run restarts from (required, 0 included)")
	f.StringArrayVar(&o.evalReports, "eval-report", nil,
		"train.stage.advance: file holding an eval report of the stage the run leaves (repeatable)")
	f.StringArrayVar(&o.ladderDecisions, "ladder-decision", nil,
		"train.create: file holding a 150M-token ladder decision for a custom dataset (repeatable)")
	readsFile(f, "manifest", "signature", "entitlement-file", "eval-report", "ladder-decision")
	plainValue(f, "confirmation-ref", "a reference (cfr_…) to a deposited confirmation, spendable only by a caller of its account with the entitlement and manifest it binds")
	plainValue(f, "idempotency-key", "names one admission request; it grants nothing")
	for _, req := range []string{"booking", "confirmation-ref", "idempotency-key"} {
		_ = cmd.MarkFlagRequired(req)
	}
	return cmd
}

// maxEvalTokenBytes bounds one eval-authority token file.
const maxEvalTokenBytes = 64 << 10

func (o *trainOptions) run(ctx context.Context, changed func(string) bool, stdout, stderr io.Writer) error {
	usageErr := func(_ io.Writer, msg string) error {
		return o.conn.localErr(stdout, stderr, api.CodeClientInput, msg, exitFailed)
	}
	if err := o.conn.validate(); err != nil {
		return usageErr(stderr, err.Error())
	}
	if err := checkActionFlags(api.Action(o.action), changed); err != nil {
		return usageErr(stderr, err.Error())
	}
	if n := len(o.evalReports) + len(o.ladderDecisions); n > api.MaxEvalReports {
		return usageErr(stderr, fmt.Sprintf("%d eval-authority tokens: a request carries at most %d", n, api.MaxEvalReports))
	}
	req := api.AdmissionRequest{
		Action: api.Action(o.action), BookingID: o.booking, IdempotencyKey: o.idempotencyKey,
		ConfirmationRef: o.confirmationRef, RunID: o.runID, ReleasesBooking: o.releaseBooking,
		Stage: o.stage,
	}
	if spec, _ := req.Action.Spec(); spec.CheckpointStep {
		// checkActionFlags made sure the flag was given: 0 is sent as 0.
		req.CheckpointStep = &o.checkpointStep
	}
	if req.Action.CarriesManifest() {
		data, digest, err := safefile.ReadManifest(o.manifestPath, manifest.MaxBytes)
		if err != nil {
			return o.conn.inputErr(stdout, stderr, err)
		}
		sigPath := o.signaturePath
		if sigPath == "" {
			sigPath = o.manifestPath + ".sig"
		}
		sig, err := safefile.ReadFile(sigPath, 4096)
		if err != nil {
			return usageErr(stderr, "signature: "+err.Error())
		}
		req.Manifest, req.ManifestSignature = data, strings.TrimSpace(string(sig))
		fmt.Fprintf(stderr, "manifest %s (%d bytes)\n", digest, len(data))
	}
	for _, files := range []struct {
		flag  string
		paths []string
	}{{"eval-report", o.evalReports}, {"ladder-decision", o.ladderDecisions}} {
		for _, p := range files.paths {
			raw, err := safefile.ReadFile(p, maxEvalTokenBytes)
			if err != nil {
				return o.conn.inputErr(stdout, stderr, fmt.Errorf("--%s: %w", files.flag, err))
			}
			tok := strings.TrimSpace(string(raw))
			if tok == "" {
				return usageErr(stderr, fmt.Sprintf("--%s %s: the file is empty", files.flag, inert.Text(p)))
			}
			req.EvalReports = append(req.EvalReports, tok)
		}
	}
	ent, err := o.conn.src.read("entitlement-file", o.entitlementFile, "ITOGATE_ENTITLEMENT", "entitlement token")
	if err != nil {
		return o.conn.inputErr(stdout, stderr, err)
	}
	req.EntitlementToken = ent
	c, err := o.conn.client()
	if err != nil {
		return usageErr(stderr, err.Error())
	}
	ctx, cancel := o.conn.withDeadline(ctx)
	defer cancel()
	resp, err := c.Admit(ctx, req)
	if err != nil {
		return o.conn.transportErr(ctx, stdout, stderr, err)
	}
	if resp.Recovered {
		fmt.Fprintln(stderr, "note: the first answer was lost; this is the stored admission for the idempotency key")
	}
	return render(stdout, stderr, resp, o.conn.jsonOut, "train")
}

type statusOptions struct {
	conn connOptions
	key  string
}

func newStatusCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status --idempotency-key KEY",
		Short: "Show the stored admission for an idempotency key (query this before retrying)",
		Long: `Show the stored admission for an idempotency key of your account. Ask this
before retrying after an ambiguous failure: a stored allow is the answer.

Exit status: 0 found, 3 not found (nothing was admitted under the key),
4 bad input, 5 unavailable, 6 unauthenticated, 7 revoked credential, 1 other.
With --json every outcome is one envelope on stdout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.conn.src = &secretSource{stdin: cmd.InOrStdin(), getenv: os.Getenv}
			c, err := o.conn.client()
			if err != nil {
				return o.conn.inputErr(stdout, stderr, err)
			}
			ctx, cancel := o.conn.withDeadline(cmd.Context())
			defer cancel()
			resp, err := c.Status(ctx, o.key)
			if err != nil {
				return o.conn.transportErr(ctx, stdout, stderr, err)
			}
			return render(stdout, stderr, resp, o.conn.jsonOut, "status")
		},
	}
	o.conn.bind(cmd)
	cmd.Flags().StringVar(&o.key, "idempotency-key", "", "idempotency key")
	plainValue(cmd.Flags(), "idempotency-key", "names one admission request; it grants nothing")
	_ = cmd.MarkFlagRequired("idempotency-key")
	return cmd
}

// render prints an admission answer (train, status): unchanged with
// --json, else the allow or the stored admission, fact by fact.
func render(w, stderr io.Writer, resp client.Response, raw bool, path string) error {
	return renderAnswer(w, stderr, resp, raw, path, "DENY  ", func(w io.Writer, d api.AdmissionData) {
		t := inert.Text
		fmt.Fprintf(w, "ALLOW  %s  run_id=%s  state=%s  decision_id=%s\n", t(string(d.Action)), t(d.RunID), t(string(d.State)), t(d.DecisionID))
		// What was admitted, each fact on its own line: compare the
		// digest with the manifest you would send before retrying.
		for _, f := range []struct{ label, v string }{
			{"manifest", d.ManifestDigest}, {"booking", d.BookingID},
			{"idempotency_key", d.IdempotencyKey}, {"bundle_revision", d.BundleRevision},
			{"run_state", string(d.RunState)},
		} {
			if f.v != "" {
				fmt.Fprintf(w, "  %s %s\n", f.label, t(f.v))
			}
		}
	})
}

// renderAnswer prints the server's answer of a client command (the command
// at path) and returns its exit code from the command's group of the exit
// table. With --json (raw) the envelope is printed unchanged; else show
// prints the data of a success, and an error prints one line (NOT FOUND
// for a 404, else refused, e.g. "DENY  ") with its violations and fixes.
// An answer that is not an envelope is no definite answer (exit 5, with
// --json an envelope of the client's own).
func renderAnswer[D any](w, stderr io.Writer, resp client.Response, raw bool, path, refused string, show func(io.Writer, D)) error {
	var env api.Envelope[*D]
	isEnvelope := json.Unmarshal(resp.Body, &env) == nil
	if !isEnvelope {
		if raw {
			b, _ := json.Marshal(api.Envelope[any]{Error: &api.ErrorBody{Code: api.CodeClientResponse,
				Message: fmt.Sprintf("HTTP %d: the response is not an itogate envelope", resp.Status)}})
			fmt.Fprintln(w, string(b))
		} else {
			fmt.Fprintf(stderr, "itogate: %s: HTTP %d: the response is not an itogate envelope\n", api.CodeClientResponse, resp.Status)
		}
		return exitError{exitUnavailable}
	}
	if raw {
		_, _ = w.Write(resp.Body)
	} else {
		// Every string of the answer is the server's: printed inert (no
		// escape sequence, no line of its own), codes included.
		t := inert.Text
		switch {
		case env.OK && env.Data != nil:
			show(w, *env.Data)
		case env.Error != nil && resp.Status == 404:
			fmt.Fprintf(w, "NOT FOUND  %s: %s\n", t(string(env.Error.Code)), t(env.Error.Message))
		case env.Error != nil:
			fmt.Fprintf(w, "%s HTTP %d  %s: %s\n", refused, resp.Status, t(string(env.Error.Code)), t(env.Error.Message))
			for _, v := range env.Error.Violations {
				fmt.Fprintf(w, "  - %-34s [%s] %s\n", t(string(v.Code)), t(v.Gate), t(v.Message))
				if v.Fix != "" {
					fmt.Fprintf(w, "    fix: %s\n", t(v.Fix))
				}
			}
			if env.Error.DecisionID != "" {
				fmt.Fprintf(w, "  decision_id=%s\n", t(env.Error.DecisionID))
			}
		}
		if env.Notice != "" {
			fmt.Fprintf(w, "  note: %s\n", t(env.Notice))
		}
	}
	var code api.Code
	if env.Error != nil {
		code = env.Error.Code
	}
	return exitError{exitForCommand(path, resp.Status, code)}
}

// exitForCommand is exitFor's code when the command's group of the exit
// table has it, else the group's code for any other failure: a command
// exits only with codes its table documents.
func exitForCommand(path string, status int, code api.Code) int {
	e := exitFor(status, code)
	for _, r := range exitGroupOf(path).rows {
		if r.code == e {
			return e
		}
	}
	return exitCodeOf(path, kindOther)
}

// exitFor maps an answer to the documented exit code (see the constants).
func exitFor(status int, code api.Code) int {
	switch {
	case revokedCodes[code]:
		return exitRevoked
	case status >= 200 && status < 300:
		return 0
	case status == 403 || status == 409:
		return exitDenied
	case status == 404:
		return exitNotFound
	case status == 401:
		return exitUnauthenticated
	case status == 400 || status == 413 || status == 415:
		return exitFailed
	case status == 408 || status == 429 || status >= 500:
		return exitUnavailable
	case status >= 400 && status < 500:
		return exitFailed // any other refusal of the request itself
	}
	return 1
}

// defaultServer is the server of the client commands without --server and
// $ITOGATE_URL.
const defaultServer = "http://127.0.0.1:8443"

// serverURL is --server, else $ITOGATE_URL, else defaultServer: resolved
// when the command runs, so --help never shows the environment's value. A
// URL with a password is refused: a credential in an argument is visible
// in ps, and the server takes bearer tokens only.
func serverURL(flag string, getenv func(string) string) (string, error) {
	s := flag
	if s == "" {
		s = getenvOr(getenv, "ITOGATE_URL", defaultServer)
	}
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return "", errors.New("the server URL (--server or $ITOGATE_URL) holds user credentials: " +
			"give the URL without them; the caller's identity is its bearer token")
	}
	return s, nil
}
