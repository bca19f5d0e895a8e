package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/client"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/safefile"
)

// Exit codes of train and status: 0 allow/found, 2 denied (403/409), 3 not
// found, 4 bad input or server error, 1 anything else.
const (
	exitDenied   = 2
	exitNotFound = 3
	exitFailed   = 4
)

type connOptions struct {
	server    string
	tokenFile string
	timeout   time.Duration
	jsonOut   bool
}

func (c *connOptions) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.server, "server", envOr("ITOGATE_URL", "http://127.0.0.1:8443"), "itogate base URL ($ITOGATE_URL)")
	cmd.Flags().StringVar(&c.tokenFile, "token-file", "", "file holding the caller bearer token (default $ITOGATE_TOKEN)")
	cmd.Flags().DurationVar(&c.timeout, "timeout", 15*time.Second, "overall timeout per request")
	cmd.Flags().BoolVar(&c.jsonOut, "json", false, "print the response envelope unchanged")
}

func (c *connOptions) client() (*client.Client, error) {
	bearer, err := secret(c.tokenFile, "ITOGATE_TOKEN", "caller token")
	if err != nil {
		return nil, err
	}
	return client.New(client.Options{BaseURL: c.server, Bearer: bearer, Timeout: c.timeout})
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

Exit status: 0 allowed, 2 denied, 4 bad input or server unavailable, 1 other.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), stdout, stderr) },
	}
	o.conn.bind(cmd)
	f := cmd.Flags()
	f.StringVar(&o.action, "action", "train.create", "train.create, train.cancel, train.cleanup or booking.release")
	f.StringVar(&o.booking, "booking", "", "booking id")
	f.StringVar(&o.manifestPath, "manifest", "", "training manifest (JSON), train.create only")
	f.StringVar(&o.signaturePath, "signature", "", "detached manifest signature file (default <manifest>.sig)")
	f.StringVar(&o.entitlementFile, "entitlement-file", "", "file holding the entitlement token (default $ITOGATE_ENTITLEMENT)")
	f.StringVar(&o.confirmationRef, "confirmation-ref", "", "confirmation reference (cfr_…)")
	f.StringVar(&o.idempotencyKey, "idempotency-key", "", "idempotency key for this admission")
	f.StringVar(&o.runID, "run-id", "", "run id (train.cancel, train.cleanup)")
	f.BoolVar(&o.releaseBooking, "release-booking", false, "train.cleanup: also release the booking (needs a booking.release confirmation)")
	for _, req := range []string{"booking", "confirmation-ref", "idempotency-key"} {
		_ = cmd.MarkFlagRequired(req)
	}
	return cmd
}

func (o *trainOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	req := client.AdmissionRequest{
		Action: o.action, BookingID: o.booking, IdempotencyKey: o.idempotencyKey,
		ConfirmationRef: o.confirmationRef, RunID: o.runID, ReleasesBooking: o.releaseBooking,
	}
	if o.action == "train.create" {
		if o.manifestPath == "" {
			return usageErr(stderr, "--manifest is required for train.create")
		}
		data, digest, err := safefile.ReadManifest(o.manifestPath, manifest.MaxBytes)
		if err != nil {
			return usageErr(stderr, err.Error())
		}
		sigPath := o.signaturePath
		if sigPath == "" {
			sigPath = o.manifestPath + ".sig"
		}
		sig, err := readSmall(sigPath, 4096)
		if err != nil {
			return usageErr(stderr, "signature: "+err.Error())
		}
		req.Manifest, req.ManifestSignature = data, strings.TrimSpace(string(sig))
		fmt.Fprintf(stderr, "manifest %s (%d bytes)\n", digest, len(data))
	}
	ent, err := secret(o.entitlementFile, "ITOGATE_ENTITLEMENT", "entitlement token")
	if err != nil {
		return usageErr(stderr, err.Error())
	}
	req.EntitlementToken = ent
	c, err := o.conn.client()
	if err != nil {
		return usageErr(stderr, err.Error())
	}
	resp, err := c.Admit(ctx, req)
	if err != nil {
		fmt.Fprintln(stderr, "itogate:", err)
		return exitError{exitFailed}
	}
	if resp.Recovered {
		fmt.Fprintln(stderr, "note: the first answer was lost; this is the stored admission for the idempotency key")
	}
	return render(stdout, resp, o.conn.jsonOut)
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
4 bad input or server unavailable.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.conn.client()
			if err != nil {
				return usageErr(stderr, err.Error())
			}
			resp, err := c.Status(cmd.Context(), o.key)
			if err != nil {
				fmt.Fprintln(stderr, "itogate:", err)
				return exitError{exitFailed}
			}
			return render(stdout, resp, o.conn.jsonOut)
		},
	}
	o.conn.bind(cmd)
	cmd.Flags().StringVar(&o.key, "idempotency-key", "", "idempotency key")
	_ = cmd.MarkFlagRequired("idempotency-key")
	return cmd
}

// render prints the envelope (unchanged with --json) and maps the status to
// the exit code.
func render(w io.Writer, resp client.Response, raw bool) error {
	if raw {
		_, _ = w.Write(resp.Body)
	} else {
		var env struct {
			OK     bool           `json:"ok"`
			Notice string         `json:"notice"`
			Data   map[string]any `json:"data"`
			Error  *struct {
				Code       string `json:"code"`
				Message    string `json:"message"`
				DecisionID string `json:"decision_id"`
				Violations []struct {
					Code, Gate, Message, Fix string
				} `json:"violations"`
			} `json:"error"`
		}
		if err := json.Unmarshal(resp.Body, &env); err != nil {
			fmt.Fprintf(w, "HTTP %d: response is not an itogate envelope\n", resp.Status)
			return exitError{exitFailed}
		}
		switch {
		case env.OK && env.Data != nil:
			fmt.Fprintf(w, "ALLOW  %v  run_id=%v  state=%v  decision_id=%v\n",
				env.Data["action"], env.Data["run_id"], env.Data["state"], env.Data["decision_id"])
		case env.Error != nil && resp.Status == 404:
			fmt.Fprintf(w, "NOT FOUND  %s: %s\n", env.Error.Code, env.Error.Message)
		case env.Error != nil:
			fmt.Fprintf(w, "DENY   HTTP %d  %s: %s\n", resp.Status, env.Error.Code, env.Error.Message)
			for _, v := range env.Error.Violations {
				fmt.Fprintf(w, "  - %-34s [%s] %s\n", v.Code, v.Gate, v.Message)
				if v.Fix != "" {
					fmt.Fprintf(w, "    fix: %s\n", v.Fix)
				}
			}
			if env.Error.DecisionID != "" {
				fmt.Fprintf(w, "  decision_id=%s\n", env.Error.DecisionID)
			}
		}
		if env.Notice != "" {
			fmt.Fprintf(w, "  note: %s\n", env.Notice)
		}
	}
	switch {
	case resp.Status == 200:
		return nil
	case resp.Status == 403 || resp.Status == 409:
		return exitError{exitDenied}
	case resp.Status == 404:
		return exitError{exitNotFound}
	default:
		return exitError{exitFailed}
	}
}

func usageErr(w io.Writer, msg string) error {
	fmt.Fprintln(w, "itogate:", msg)
	return exitError{exitFailed}
}

// secret reads a token from a file, else from an environment variable; never
// from a flag value, which other users can read in the process list.
func secret(file, env, what string) (string, error) {
	if file != "" {
		b, err := readSmall(file, 64<<10)
		if err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if v := os.Getenv(env); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("%s: give a file or set $%s", what, env)
}

func readSmall(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errors.New("file too large")
	}
	return b, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
