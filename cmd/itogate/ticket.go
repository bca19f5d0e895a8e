package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/spf13/cobra"

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
}

func newTicketCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ticket",
		Short: "Admission tickets: verify one offline (Slurm prolog, Ray job submitter, any runtime)",
	}
	cmd.AddCommand(newTicketVerifyCmd(stdout, stderr))
	return cmd
}

func newTicketVerifyCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &ticketVerifyOptions{}
	cmd := &cobra.Command{
		Use:   "verify (--jwks FILE | --pem FILE --key-id KID --algorithm ALG) --issuer ISS [expectations] [TICKET_FILE|-]",
		Short: "Verify an admission ticket offline against the ticket JWKS or a PEM public key",
		Long: `Verify an admission ticket offline: signature (the algorithm comes from the key,
never from the ticket), typ ito-ticket+jwt, issuer, audience, exp and iat with
leeway, and every ticket claim; then each expectation given as a flag. Nothing is
fetched: the keys come from a file (GET /v1/tickets/jwks saved, or a PEM).

The ticket is read from TICKET_FILE, or from standard input when it is "-" or
absent (never from the command line, where other users could read it in ps).

Exit codes:
  0  the ticket verifies and meets every expectation
  1  the ticket does not verify (forged, altered, expired, wrong typ/iss/aud, claims missing)
  2  usage: bad flags, an unreadable key file or ticket
  3  the ticket verifies but names another run, booking, account or topology than expected

On success it prints the verified claims (--json: as JSON) to standard output;
on failure one line naming the reason to standard error, never the ticket.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			code := runTicketVerify(o, args, cmd.InOrStdin(), stdout, stderr)
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
	f.DurationVar(&o.leeway, "leeway", verify.DefaultLeeway, "clock skew tolerated on exp and iat")
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
	readsFile(f, "jwks", "pem")
	fileArgs(cmd)
	return cmd
}

func runTicketVerify(o *ticketVerifyOptions, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	usage := func(err error) int {
		fmt.Fprintln(stderr, "itogate ticket verify: usage:", inert.Text(err.Error()))
		return ticketExitUsage
	}
	if o.issuer == "" {
		return usage(errors.New("--issuer is required"))
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
	if o.json {
		out, _ := json.MarshalIndent(c.Map(), "", "  ")
		fmt.Fprintln(stdout, string(out))
	} else {
		// The claims are the issuer's strings: printed inert.
		t := inert.Text
		fmt.Fprintf(stdout, "ok: run %s booking %s account %s: %d × %s (%d nodes × %d) in %s until %s (jti %s)\n",
			t(c.RunID), t(c.BookingID), t(c.Account), c.WorldSize, t(c.GPUType), c.Nodes, c.GPUsPerNode, t(c.Region),
			c.Expiry.UTC().Format(time.RFC3339), t(c.ID))
	}
	return ticketExitOK
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
