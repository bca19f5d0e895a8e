package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/client"
	"github.com/itocompute/itogate/gatekeeper/inert"
)

// revokeRetryHint ends a transport failure of a revocation: the server
// stores a revocation once, so sending it again is safe.
const revokeRetryHint = "the outcome is unknown: a revocation is idempotent, send it again"

// revokeKind is one subcommand of itogate revoke: the revocation kind it
// sends, the identity it authenticates as, and the flag naming its subject.
type revokeKind struct {
	name    string // the subcommand
	kind    string // api.RevocationRequest.Kind ("" for a confirmation)
	bearer  bearerSource
	subject string // the flag naming the subject
	what    string // what the subject is, for the help
	short   string
}

var revokeKinds = []revokeKind{
	{name: "confirmation", bearer: depositorBearer, subject: "jti", what: "the confirmation's jti (also before it is deposited)",
		short: "Revoke a confirmation by --ref or --jti (the confirmation authority's depositor identity)"},
	{name: "entitlement", kind: "entitlement", bearer: revokerBearer, subject: "jti", what: "the entitlement's jti",
		short: "Revoke an entitlement by its jti: the runs admitted under it stop (the revoker identity)"},
	{name: "booking", kind: "booking", bearer: revokerBearer, subject: "booking", what: "the booking id",
		short: "Revoke a booking: every entitlement of it, and its runs stop (the revoker identity)"},
	{name: "caller", kind: "caller_key", bearer: revokerBearer, subject: "key-id", what: "the caller key's id (kid)",
		short: "Withdraw a caller key from trust: its requests are refused; no run stops (the revoker identity)"},
}

func newRevokeCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revoke",
		Short: "Revoke a confirmation, an entitlement, a booking or a caller key",
		Long: `Revoke a credential before it expires, as the authority that issued it:
a confirmation as the confirmation authority (its depositor token), an
entitlement, a booking or a caller key as the entitlement issuer's revoker
(its revoker token). Tokens come from a file, standard input or the
environment, never from an argument. A revocation is stored until the
revoked token's own expiry (--expires-at) and is idempotent: revoking again
answers the stored one.`,
	}
	for _, k := range revokeKinds {
		cmd.AddCommand(newRevokeKindCmd(k, stdout, stderr))
	}
	return cmd
}

type revokeOptions struct {
	conn             connOptions
	k                revokeKind
	subject, ref     string
	expiresAt        string
	reason           string
	expiresAtChanged func() bool
}

func newRevokeKindCmd(k revokeKind, stdout, stderr io.Writer) *cobra.Command {
	o := &revokeOptions{k: k, conn: connOptions{bearer: k.bearer, retryHint: revokeRetryHint}}
	use := k.name + " --" + k.subject + " " + strings.ToUpper(strings.ReplaceAll(k.subject, "-", "_")) + " --expires-at TIME"
	if k.name == "confirmation" {
		use = "confirmation (--ref REF | --jti JTI --expires-at TIME)"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: k.short,
		Long: k.short + `.

--expires-at is when the revoked token expires (RFC 3339, or unix seconds):
the revocation is kept until then, at most 366 days ahead.` + confirmationNote(k) + `

Exit status: 0 revoked (now, or already: the stored revocation), 2 refused
(this identity may not revoke this kind), 3 no confirmation deposited under
--ref, 4 bad input, 5 unavailable or no definite answer (send it again), 6
unauthenticated, 1 other. With --json every outcome is one envelope on
stdout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.conn.src = &secretSource{stdin: cmd.InOrStdin(), getenv: os.Getenv}
			o.expiresAtChanged = func() bool { return cmd.Flags().Changed("expires-at") }
			return o.run(cmd.Context(), stdout, stderr)
		},
	}
	o.conn.bind(cmd)
	f := cmd.Flags()
	f.StringVar(&o.subject, k.subject, "", k.what)
	f.StringVar(&o.expiresAt, "expires-at", "", "when the revoked token expires: RFC 3339 (2026-12-31T00:00:00Z) or unix seconds")
	f.StringVar(&o.reason, "reason", "", "why, for the audit trail (at most 512 bytes)")
	if k.name == "confirmation" {
		f.StringVar(&o.ref, "ref", "", "the confirmation_ref (cfr_…) of a deposited confirmation")
		cmd.MarkFlagsOneRequired("ref", "jti")
		cmd.MarkFlagsMutuallyExclusive("ref", "jti")
	} else {
		_ = cmd.MarkFlagRequired(k.subject)
		_ = cmd.MarkFlagRequired("expires-at")
	}
	return cmd
}

func confirmationNote(k revokeKind) string {
	if k.name != "confirmation" {
		return ""
	}
	return `

With --ref the stored confirmation is revoked and --expires-at is optional
(default: its own expiry); with --jti it is required.`
}

// parseExpiresAt reads --expires-at: RFC 3339 or unix seconds, positive.
func parseExpiresAt(v string) (int64, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0, fmt.Errorf("--expires-at %d: unix seconds must be positive", n)
		}
		return n, nil
	}
	at, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return 0, fmt.Errorf("--expires-at %q: give RFC 3339 (2026-12-31T00:00:00Z) or unix seconds", v)
	}
	if at.Unix() <= 0 {
		return 0, fmt.Errorf("--expires-at %q: before 1970", v)
	}
	return at.Unix(), nil
}

func (o *revokeOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	bad := func(msg string) error {
		return o.conn.localErr(stdout, stderr, api.CodeClientInput, msg, exitFailed)
	}
	if err := o.conn.validate(); err != nil {
		return bad(err.Error())
	}
	var expires int64
	switch {
	case o.expiresAtChanged():
		var err error
		if expires, err = parseExpiresAt(o.expiresAt); err != nil {
			return bad(err.Error())
		}
	case o.ref == "":
		return bad("--expires-at is required (the revoked token's expiry)")
	}
	c, err := o.conn.client()
	if err != nil {
		return o.conn.inputErr(stdout, stderr, err)
	}
	ctx, cancel := o.conn.withDeadline(ctx)
	defer cancel()
	var resp client.Response
	if o.k.name == "confirmation" {
		resp, err = c.RevokeConfirmation(ctx, api.ConfirmationRevocationRequest{Ref: o.ref, JTI: o.subject, ExpiresAt: expires, Reason: o.reason})
	} else {
		resp, err = c.Revoke(ctx, api.RevocationRequest{Kind: o.k.kind, Subject: o.subject, ExpiresAt: expires, Reason: o.reason})
	}
	if err != nil {
		return o.conn.transportErr(ctx, stdout, stderr, err)
	}
	return renderAnswer(stdout, stderr, resp, o.conn.jsonOut, "revoke "+o.k.name, "REFUSED", showRevoked)
}

// showRevoked prints a stored revocation, every string inert.
func showRevoked(w io.Writer, r api.Revoked) {
	t := inert.Text
	label := "REVOKED"
	if !r.Created {
		label = "ALREADY REVOKED"
	}
	fmt.Fprintf(w, "%s  kind=%s  subject=%s\n", label, t(r.Kind), t(r.Subject))
	fmt.Fprintf(w, "  revoked_by %s\n  revoked_at %s\n  expires_at %s\n", t(r.RevokedBy), unixTime(r.RevokedAt), unixTime(r.ExpiresAt))
}
