package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/client"
	"github.com/itocompute/itogate/gatekeeper/inert"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// maxTicketInput bounds the ticket read from a file or stdin.
const maxTicketInput = verify.DefaultMaxTokenBytes

type ticketVerifyOptions struct {
	jwksFile, pemFile, keyID, algorithm string
	issuer, audience                    string
	leeway                              time.Duration
	expect                              ticket.Expect
	json                                bool
	// --online: ask itogate too (POST /v1/tickets/verify) with the
	// scheduler token, binding the run to jobID when set.
	online            bool
	server, tokenFile string
	jobID             string
	timeout           time.Duration
	src               *secretSource
}

// reCompactJWS is the shape of a ticket: three base64url parts.
var reCompactJWS = regexp.MustCompile(`^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$`)

// reJobID is what a job id may be (the server's rule).
var reJobID = regexp.MustCompile(api.JobIDPattern)

func newTicketCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ticket",
		Short: "Admission tickets: verify one offline (Slurm prolog, Ray job submitter, any runtime)",
	}
	cmd.AddCommand(newTicketVerifyCmd(stdout, stderr), newTicketRenewCmd(stdout, stderr))
	return cmd
}

func newTicketVerifyCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &ticketVerifyOptions{}
	cmd := &cobra.Command{
		Use:   "verify (--jwks FILE | --pem FILE --key-id KID --algorithm ALG) --issuer ISS [expectations] [TICKET_FILE|-]",
		Short: "Verify an admission ticket offline against the ticket JWKS or a PEM public key",
		Long: `Verify an admission ticket offline: signature (the algorithm comes from the key,
never from the ticket), typ ito-ticket+jwt, issuer, audience, exp (no leeway: a
ticket verifies offline for at most its lifetime), iat with leeway, and every
ticket claim; then each expectation given as a flag. Nothing is
fetched: the keys come from a file (GET /v1/tickets/jwks saved, or a PEM).

The ticket is read from TICKET_FILE, or from standard input when it is "-" or
absent (never from the command line, where other users could read it in ps).

With --online it then asks itogate (POST /v1/tickets/verify, with the scheduler
token of --token-file or $ITOGATE_SCHEDULER_TOKEN) whether the ticket's run may
still take work, and with --job-id binds the run to that one job: the first job
id is the run's for good, a second one is refused (TICKET_JOB_BOUND).

Exit codes:
  0  the ticket verifies and meets every expectation (--online: and its run is live)
  1  the ticket does not verify (forged, altered, expired, wrong typ/iss/aud, claims missing)
  2  usage: bad flags, an unreadable key file or ticket
  3  the ticket verifies but names another run, booking, account or topology than expected
  4  --online: withdrawn: the run is revoked, halted or ended, or bound to another job
  5  --online: no answer from itogate (unreachable, 401, 5xx, --timeout passed): fail closed

On success it prints the verified claims (--json: as JSON) to standard output;
on failure one line naming the reason to standard error, never the ticket.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.src = &secretSource{stdin: cmd.InOrStdin(), getenv: os.Getenv}
			code := runTicketVerify(cmd.Context(), o, args, cmd.InOrStdin(), stdout, stderr)
			if code != ticketExitOK {
				return exitError{code: code}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.jwksFile, "jwks", "", "ticket public keys: a JWKS file (GET /v1/tickets/jwks)")
	f.StringVar(&o.pemFile, "pem", "", "ticket public key: a PEM file (needs --key-id and --algorithm)")
	f.StringVar(&o.keyID, "key-id", "", "kid of the --pem key")
	f.StringVar(&o.algorithm, "algorithm", "", "algorithm of the --pem key: EdDSA or ES256")
	f.StringVar(&o.issuer, "issuer", "", "required iss: the issuing itogate's tickets.issuer")
	f.StringVar(&o.audience, "audience", ticket.DefaultAudience, "required aud")
	f.DurationVar(&o.leeway, "leeway", verify.DefaultLeeway, "clock skew tolerated on iat (never on exp)")
	f.StringVar(&o.expect.RunID, "run-id", "", "expected run_id")
	f.StringVar(&o.expect.BookingID, "booking", "", "expected booking_id")
	f.StringVar(&o.expect.Account, "account", "", "expected sub (account)")
	f.StringVar(&o.expect.ManifestDigest, "manifest-digest", "", "expected manifest_digest (sha256:<hex>)")
	f.StringVar(&o.expect.GPUType, "gpu-type", "", "expected gpu_type")
	f.StringVar(&o.expect.Region, "region", "", "expected region")
	f.StringVar(&o.expect.Action, "action", "", "expected action (default train.create)")
	f.Int64Var(&o.expect.WorldSize, "world-size", 0, "expected world_size (GPUs)")
	f.Int64Var(&o.expect.Nodes, "nodes", 0, "expected nodes")
	f.Int64Var(&o.expect.GPUsPerNode, "gpus-per-node", 0, "expected gpus_per_node")
	f.BoolVar(&o.json, "json", false, "print the verified claims as JSON")
	f.BoolVar(&o.online, "online", false, "also ask itogate whether the run is live (POST /v1/tickets/verify)")
	f.StringVar(&o.server, "server", "", "--online: itogate base URL (default $ITOGATE_URL, else "+defaultServer+")")
	f.StringVar(&o.tokenFile, "token-file", "", "--online: file holding the scheduler bearer token (default $ITOGATE_SCHEDULER_TOKEN)")
	f.StringVar(&o.jobID, "job-id", "", "--online: bind the run to this scheduler job (a Slurm job id, a Ray submission id)")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "--online: deadline of the online check (exit 5 when it passes)")
	readsFile(f, "jwks", "pem", "token-file")
	fileArgs(cmd)
	return cmd
}

func runTicketVerify(ctx context.Context, o *ticketVerifyOptions, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	usage := func(err error) int {
		fmt.Fprintln(stderr, "itogate ticket verify: usage:", inert.Text(err.Error()))
		return ticketExitUsage
	}
	if o.issuer == "" {
		return usage(errors.New("--issuer is required"))
	}
	if !o.online && (o.server != "" || o.tokenFile != "" || o.jobID != "") {
		return usage(errors.New("--server, --token-file and --job-id need --online"))
	}
	if o.jobID != "" && !reJobID.MatchString(o.jobID) {
		return usage(errors.New("--job-id: 1-128 characters of [A-Za-z0-9_.:-], the first a letter or digit"))
	}
	if o.online && o.timeout <= 0 {
		return usage(errors.New("--timeout must be positive"))
	}
	keys, err := o.keySet()
	if err != nil {
		return usage(err)
	}
	raw, err := readTicket(args, stdin)
	if err != nil {
		return usage(err)
	}
	v, err := ticket.NewVerifier(ticket.VerifierOptions{Issuer: o.issuer, Audience: o.audience, Keys: keys, Leeway: o.leeway})
	if err != nil {
		return usage(err)
	}
	c, err := v.Verify(raw, time.Now())
	if err != nil {
		// verify's messages name the purpose and kind, never token bytes.
		fmt.Fprintln(stderr, "itogate ticket verify: rejected:", inert.Text(err.Error()))
		return ticketExitRejected
	}
	if err := c.Check(o.expect); err != nil {
		fmt.Fprintf(stderr, "itogate ticket verify: mismatch: %s (jti %s)\n", inert.Text(err.Error()), inert.Text(c.ID))
		return ticketExitMismatch
	}
	online := ""
	if o.online {
		if len(args) == 0 || args[0] == "-" {
			o.src.stdinUsed = "ticket"
		}
		var code int
		if online, code = o.checkOnline(ctx, string(raw), c.WorldSize, stderr); code != ticketExitOK {
			return code
		}
	}
	if o.json {
		out, _ := json.MarshalIndent(c.Map(), "", "  ")
		fmt.Fprintln(stdout, string(out))
	} else {
		// The claims are the issuer's strings: printed inert.
		t := inert.Text
		fmt.Fprintf(stdout, "ok: run %s booking %s account %s: %d × %s (%d nodes × %d) in %s until %s (jti %s)\n",
			t(c.RunID), t(c.BookingID), t(c.Account), c.WorldSize, t(c.GPUType), c.Nodes, c.GPUsPerNode, t(c.Region),
			c.Expiry.UTC().Format(time.RFC3339), t(c.ID))
		if online != "" {
			fmt.Fprintln(stdout, online)
		}
	}
	return ticketExitOK
}

// checkOnline asks itogate whether the ticket's run may take work (and
// binds the job), and what it holds: more GPUs than the ticket's
// worldSize once a stage advance grew it. It returns the line to print on
// success, or the exit
// code of the refusal with its line written to stderr: 4 for an answer
// that withdraws the ticket (403/404 with a code), 2 for a request the
// server found malformed, 5 for anything else (fail closed).
func (o *ticketVerifyOptions) checkOnline(ctx context.Context, raw string, worldSize int64, stderr io.Writer) (string, int) {
	say := func(code int, format string, args ...any) (string, int) {
		fmt.Fprintf(stderr, "itogate ticket verify: "+format+"\n", args...)
		return "", code
	}
	server, err := serverURL(o.server, o.src.getenv)
	if err != nil {
		return say(ticketExitUsage, "usage: %s", inert.Text(err.Error()))
	}
	bearer, err := o.src.read("token-file", o.tokenFile, "ITOGATE_SCHEDULER_TOKEN", "scheduler token")
	if err != nil {
		return say(ticketExitUsage, "usage: %s", inert.Text(err.Error()))
	}
	cl, err := client.New(client.Options{BaseURL: server, Bearer: bearer, Timeout: o.timeout, Attempts: 1})
	if err != nil {
		return say(ticketExitUsage, "usage: %s", inert.Text(err.Error()))
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	resp, err := cl.CheckTicket(ctx, raw, o.jobID)
	if err != nil {
		return say(ticketExitUnavailable, "online check unavailable: %s", inert.Text(err.Error()))
	}
	var env api.Envelope[api.TicketCheck]
	if json.Unmarshal(resp.Body, &env) != nil {
		return say(ticketExitUnavailable, "online check unavailable: HTTP %d without an envelope", resp.Status)
	}
	switch {
	case resp.Status == http.StatusOK && env.OK && env.Data.Live:
		line := "online: live (state " + inert.Text(string(env.Data.State)) + ")"
		if env.Data.JobID != "" {
			line += ", bound to job " + inert.Text(env.Data.JobID)
		}
		if g := int64(env.Data.GPUs); g > worldSize {
			line += fmt.Sprintf(", holds %d GPUs (a stage advance grew it past this ticket's %d: renew the ticket)", g, worldSize)
		}
		return line, ticketExitOK
	case env.Error == nil:
		return say(ticketExitUnavailable, "online check unavailable: HTTP %d", resp.Status)
	case resp.Status == http.StatusForbidden || resp.Status == http.StatusNotFound:
		return say(ticketExitWithdrawn, "withdrawn: %s: %s", inert.Text(string(env.Error.Code)), inert.Text(env.Error.Message))
	case resp.Status == http.StatusBadRequest:
		return say(ticketExitUsage, "usage: %s: %s", inert.Text(string(env.Error.Code)), inert.Text(env.Error.Message))
	}
	return say(ticketExitUnavailable, "online check unavailable: HTTP %d %s: %s", resp.Status,
		inert.Text(string(env.Error.Code)), inert.Text(env.Error.Message))
}

type ticketRenewOptions struct {
	conn  connOptions
	runID string
}

func newTicketRenewCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &ticketRenewOptions{}
	cmd := &cobra.Command{
		Use:   "renew --run-id ID",
		Short: "Renew a run's admission ticket while the run may run (POST /v1/runs/{run_id}/ticket)",
		Long: `Renew the admission ticket of one of the caller account's runs: itogate signs a
fresh ticket with the claims of the run's first, a new jti and a new exp (the
ticket lifetime, tickets.lifetime, 5 minutes by default), and only while the run
may take work. A cancelled, cleaned-up, released or expired run is refused
(RUN_NOT_LIVE), a halted one (RUN_HALTED), a revoked one (ENTITLEMENT_REVOKED).

Prints the new ticket on standard output (--json: the response envelope); keep
it where the job's definition lives, never in logs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.conn.src = &secretSource{stdin: cmd.InOrStdin(), getenv: os.Getenv}
			return o.run(cmd.Context(), stdout, stderr)
		},
	}
	cmd.Flags().StringVar(&o.runID, "run-id", "", "the run whose ticket to renew (required)")
	_ = cmd.MarkFlagRequired("run-id")
	o.conn.bind(cmd)
	return cmd
}

func (o *ticketRenewOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	cl, err := o.conn.client()
	if err != nil {
		return o.conn.inputErr(stdout, stderr, err)
	}
	ctx, cancel := o.conn.withDeadline(ctx)
	defer cancel()
	resp, err := cl.RenewTicket(ctx, o.runID)
	if err != nil {
		return o.conn.localErr(stdout, stderr, api.CodeClientTransport, err.Error(), exitOther)
	}
	var env api.Envelope[api.TicketRenewal]
	if json.Unmarshal(resp.Body, &env) != nil {
		return o.conn.localErr(stdout, stderr, api.CodeClientResponse, fmt.Sprintf("HTTP %d without an envelope", resp.Status), exitOther)
	}
	if o.conn.jsonOut {
		fmt.Fprintln(stdout, strings.TrimSpace(string(resp.Body)))
	}
	switch {
	case resp.Status == http.StatusOK && env.OK && !reCompactJWS.MatchString(env.Data.Ticket):
		// Only a compact JWS is printed as is: anything else from the
		// server never reaches a terminal raw.
		return o.conn.localErr(stdout, stderr, api.CodeClientResponse, "the answer's ticket is not a compact JWS", exitOther)
	case resp.Status == http.StatusOK && env.OK:
		if !o.conn.jsonOut {
			fmt.Fprintln(stdout, env.Data.Ticket)
		}
		return nil
	case env.Error != nil && !o.conn.jsonOut:
		fmt.Fprintf(stderr, "itogate: %s: %s\n", inert.Text(string(env.Error.Code)), inert.Text(env.Error.Message))
	}
	if resp.Status == http.StatusBadRequest {
		return exitError{exitFailed}
	}
	return exitError{exitOther}
}

func (o *ticketVerifyOptions) keySet() (jwk.Set, error) {
	switch {
	case o.jwksFile != "" && o.pemFile != "":
		return nil, errors.New("give --jwks or --pem, not both")
	case o.jwksFile != "":
		raw, err := safefile.ReadFile(o.jwksFile, verify.MaxKeyFileBytes)
		if err != nil {
			return nil, fmt.Errorf("--jwks: %w", err)
		}
		return verify.LoadJWKS(raw)
	case o.pemFile != "":
		if o.keyID == "" || o.algorithm == "" {
			return nil, errors.New("--pem needs --key-id and --algorithm")
		}
		raw, err := safefile.ReadFile(o.pemFile, verify.MaxKeyFileBytes)
		if err != nil {
			return nil, fmt.Errorf("--pem: %w", err)
		}
		return verify.KeySetFromPEM(o.keyID, o.algorithm, raw)
	}
	return nil, errors.New("--jwks or --pem is required")
}

// readTicket reads the ticket from its file (through the safe reader) or
// standard input, at most maxTicketInput bytes.
func readTicket(args []string, stdin io.Reader) ([]byte, error) {
	var raw []byte
	var err error
	if len(args) == 1 && args[0] != "-" {
		if raw, err = safefile.ReadFile(args[0], maxTicketInput); err != nil {
			return nil, fmt.Errorf("ticket: %w", err)
		}
	} else if raw, err = io.ReadAll(io.LimitReader(stdin, maxTicketInput+1)); err != nil {
		return nil, err
	}
	if len(raw) > maxTicketInput {
		return nil, fmt.Errorf("ticket larger than %d bytes", maxTicketInput)
	}
	raw = []byte(strings.TrimSpace(string(raw)))
	if len(raw) == 0 {
		return nil, errors.New("no ticket on input")
	}
	return raw, nil
}
