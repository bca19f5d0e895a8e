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

type connOptions struct {
	src            *secretSource // set when the command runs
	server         string
	tokenFile      string
	timeout        time.Duration
	connectTimeout time.Duration
	jsonOut        bool
}

func (c *connOptions) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.server, "server", "", "itogate base URL (default $ITOGATE_URL, else "+defaultServer+")")
	cmd.Flags().StringVar(&c.tokenFile, "token-file", "", "file holding the caller bearer token, - for standard input (default $ITOGATE_TOKEN)")
	readsFile(cmd.Flags(), "token-file")
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
	bearer, err := c.src.read("token-file", c.tokenFile, "ITOGATE_TOKEN", "caller token")
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
	return c.localErr(stdout, stderr, code, err.Error()+
		"; the outcome is unknown: ask itogate status with the same idempotency key before retrying", exitUnavailable)
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
}

func newTrainCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &trainOptions{}
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Ask itogate to admit a training run (or a lifecycle action)",
		Long: `Ask itogate to admit a training run before creating it.

The manifest is read safely (no symlinks anywhere in the path, regular file,
owned by you or root, not group/world writable, at most 1 MiB) and exactly the
bytes read are hashed and sent. After an ambiguous transport failure the client
asks for the status of its idempotency key before retrying, so a lost response
never creates a second run.

Exit status: 0 allowed, 2 denied, 4 bad input, 5 unavailable or no definite
answer (ask status first), 6 unauthenticated, 7 revoked credential (stop), 1
other. With --json every outcome, local refusals included, is one envelope
on stdout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.conn.src = &secretSource{stdin: cmd.InOrStdin(), getenv: os.Getenv}
			return o.run(cmd.Context(), stdout, stderr)
		},
	}
	o.conn.bind(cmd)
	f := cmd.Flags()
	f.StringVar(&o.action, "action", string(api.TrainCreate), api.ActionNames())
	f.StringVar(&o.booking, "booking", "", "booking id")
	f.StringVar(&o.manifestPath, "manifest", "", "training manifest (JSON), train.create only")
	f.StringVar(&o.signaturePath, "signature", "", "detached manifest signature file (default <manifest>.sig)")
	f.StringVar(&o.entitlementFile, "entitlement-file", "", "file holding the entitlement token, - for standard input (default $ITOGATE_ENTITLEMENT)")
	f.StringVar(&o.confirmationRef, "confirmation-ref", "", "confirmation reference (cfr_…)")
	f.StringVar(&o.idempotencyKey, "idempotency-key", "", "idempotency key for this admission")
	f.StringVar(&o.runID, "run-id", "", "run id (train.cancel, train.cleanup)")
	f.BoolVar(&o.releaseBooking, "release-booking", false, "train.cleanup: also release the booking (needs a booking.release confirmation)")
	readsFile(f, "manifest", "signature", "entitlement-file")
	plainValue(f, "confirmation-ref", "a reference (cfr_…) to a deposited confirmation, spendable only by a caller of its account with the entitlement and manifest it binds")
	plainValue(f, "idempotency-key", "names one admission request; it grants nothing")
	for _, req := range []string{"booking", "confirmation-ref", "idempotency-key"} {
		_ = cmd.MarkFlagRequired(req)
	}
	return cmd
}

func (o *trainOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	usageErr := func(_ io.Writer, msg string) error {
		return o.conn.localErr(stdout, stderr, api.CodeClientInput, msg, exitFailed)
	}
	if err := o.conn.validate(); err != nil {
		return usageErr(stderr, err.Error())
	}
	req := api.AdmissionRequest{
		Action: api.Action(o.action), BookingID: o.booking, IdempotencyKey: o.idempotencyKey,
		ConfirmationRef: o.confirmationRef, RunID: o.runID, ReleasesBooking: o.releaseBooking,
	}
	if req.Action.CarriesManifest() {
		if o.manifestPath == "" {
			return usageErr(stderr, "--manifest is required for "+o.action)
		}
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
	return render(stdout, stderr, resp, o.conn.jsonOut)
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
			return render(stdout, stderr, resp, o.conn.jsonOut)
		},
	}
	o.conn.bind(cmd)
	cmd.Flags().StringVar(&o.key, "idempotency-key", "", "idempotency key")
	plainValue(cmd.Flags(), "idempotency-key", "names one admission request; it grants nothing")
	_ = cmd.MarkFlagRequired("idempotency-key")
	return cmd
}

// render prints the envelope (unchanged with --json) and maps the status and
// code to the exit code.
func render(w, stderr io.Writer, resp client.Response, raw bool) error {
	var env api.Envelope[*api.AdmissionData]
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
		switch d := env.Data; {
		case env.OK && d != nil:
			fmt.Fprintf(w, "ALLOW  %s  run_id=%s  state=%s  decision_id=%s\n", t(string(d.Action)), t(d.RunID), t(string(d.State)), t(d.DecisionID))
			// What was admitted, each fact on its own line: compare the
			// digest with the manifest you would send before retrying.
			for _, f := range []struct{ label, v string }{
				{"manifest", d.ManifestDigest}, {"booking", d.BookingID},
				{"idempotency_key", d.IdempotencyKey}, {"bundle_revision", d.BundleRevision},
			} {
				if f.v != "" {
					fmt.Fprintf(w, "  %s %s\n", f.label, t(f.v))
				}
			}
		case env.Error != nil && resp.Status == 404:
			fmt.Fprintf(w, "NOT FOUND  %s: %s\n", t(string(env.Error.Code)), t(env.Error.Message))
		case env.Error != nil:
			fmt.Fprintf(w, "DENY   HTTP %d  %s: %s\n", resp.Status, t(string(env.Error.Code)), t(env.Error.Message))
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
	return exitError{exitFor(resp.Status, code)}
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
