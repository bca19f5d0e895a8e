package main

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// tokenDeps are what the token commands take from the process.
type tokenDeps struct {
	stdin          io.Reader // nil: the command's (cobra's InOrStdin)
	stdout, stderr io.Writer
	getenv         func(string) string
	now            func() time.Time
}

// tokenKind is what a kind of token fixes: the development key that signs
// it, its typ header, the development issuer and audience, and its default
// lifetime.
type tokenKind struct {
	name     string
	devKey   func(keys.DevKeys) keys.Key
	typ      string
	iss, aud string
	ttl      time.Duration
}

func newTokenCmd(d tokenDeps) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token <kind>",
		Short: "Mint a test token: development keys, or your own with --key/--kid",
		Long: `Mint a test token of one kind and print it.

Without --key it is signed with the published development key of its kind
(fixtures/keys; development mode only: a server started with --config refuses
them). With --key PEM --kid ID --issuer ISS --audience AUD it is signed with
your own PKCS#8 private key (as "itogate keygen" writes it; the algorithm
follows the key: ES256 for ECDSA P-256, EdDSA for Ed25519), for the key set
that trust.<purpose> of your configuration verifies.

Every kind takes --key, --kid, --issuer, --audience and --ttl; its other
flags are its own: see "itogate token <kind> --help".`,
		// Runnable, so that a missing or unknown kind fails (a script's
		// $(itogate token ...) gets no help text for a token).
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kinds := make([]string, 0, len(cmd.Commands()))
			for _, k := range cmd.Commands() {
				kinds = append(kinds, k.Name())
			}
			return usageError{fmt.Errorf("name the kind of token: itogate token %s", strings.Join(kinds, "|"))}
		},
	}
	cmd.AddCommand(
		newTokenCallerCmd(d),
		newTokenDepositorCmd(d),
		newTokenRevokerCmd(d),
		newTokenEntitlementCmd(d),
		newTokenConfirmationCmd(d),
		newTokenEvalReportCmd(d),
		newTokenLadderDecisionCmd(d),
	)
	cmd.SetFlagErrorFunc(tokenFlagError(cmd))
	return cmd
}

// tokenFlagError turns "unknown flag" under `itogate token <kind>` into an
// error naming the kinds that take the flag.
func tokenFlagError(parent *cobra.Command) func(*cobra.Command, error) error {
	return func(c *cobra.Command, err error) error {
		var missing *pflag.NotExistError
		if !errors.As(err, &missing) || missing.GetSpecifiedName() == "" || c == parent {
			return err
		}
		name := missing.GetSpecifiedName()
		var kinds []string
		for _, k := range parent.Commands() {
			if k.Flags().Lookup(name) != nil {
				kinds = append(kinds, k.Name())
			}
		}
		if len(kinds) == 0 {
			return err
		}
		return fmt.Errorf("%s does not take --%s: it is a flag of itogate token %s",
			c.CommandPath(), name, strings.Join(kinds, ", "))
	}
}

// tokenRunner is one kind's options, completed, validated and run in turn.
type tokenRunner interface {
	Complete() error
	Validate() error
	Run(ctx context.Context) error
}

func runToken(o tokenRunner) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if s, ok := o.(interface{ useStdin(io.Reader) }); ok {
			s.useStdin(cmd.InOrStdin())
		}
		// What Complete and Validate refuse (a key or manifest file, flags
		// that must come together) is bad input.
		if err := o.Complete(); err != nil {
			return badInput(err)
		}
		if err := o.Validate(); err != nil {
			return badInput(err)
		}
		return o.Run(cmd.Context())
	}
}

// signingKey is the key a token is signed with, and the issuer and audience
// that go with it.
type signingKey struct {
	priv             crypto.Signer
	kid, alg         string
	issuer, audience string
}

// tokenOptions are the flags every kind takes: who signs (the kind's
// development key, or --key with --kid, --issuer and --audience) and for how
// long (--ttl).
type tokenOptions struct {
	deps                             tokenDeps
	kind                             tokenKind
	keyFile, keyID, issuer, audience string
	ttl                              time.Duration
	signer                           signingKey // set by Complete
	secrets                          *secretSource
}

// useStdin sets where "-" reads a secret from (the command's standard
// input unless the deps name one).
func (o *tokenOptions) useStdin(r io.Reader) {
	if o.deps.stdin != nil {
		r = o.deps.stdin
	}
	o.secrets = &secretSource{stdin: r, getenv: o.deps.getenv}
}

func newTokenOptions(d tokenDeps, k tokenKind) tokenOptions {
	return tokenOptions{deps: d, kind: k}
}

func (o *tokenOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.keyFile, "key", "", "your own private key PEM (PKCS#8) instead of the development key; needs --kid, --issuer, --audience")
	readsFile(f, "key")
	f.StringVar(&o.keyID, "kid", "", "key id written into the token header (the key_id of the trust entry)")
	f.StringVar(&o.issuer, "issuer", "", "iss claim (with --key: the trust entry's issuer)")
	f.StringVar(&o.audience, "audience", "", "aud claim (with --key: the trust entry's audience)")
	f.DurationVar(&o.ttl, "ttl", o.kind.ttl, "lifetime: exp is iat plus this")
}

// Complete resolves the signing key: --key when given, else the kind's
// development key with the development issuer and audience.
func (o *tokenOptions) Complete() error {
	if o.keyFile == "" {
		k := o.kind.devKey(keys.Dev())
		o.signer = signingKey{priv: k.Private, kid: k.KeyID, alg: k.Algorithm, issuer: o.kind.iss, audience: o.kind.aud}
		return nil
	}
	priv, alg, err := readOwnKey(o.keyFile)
	if err != nil {
		return err
	}
	o.signer = signingKey{priv: priv, kid: o.keyID, alg: alg, issuer: o.issuer, audience: o.audience}
	return nil
}

// Validate checks the flags that must come together.
func (o *tokenOptions) Validate() error {
	if o.keyFile == "" && (o.keyID != "" || o.issuer != "" || o.audience != "") {
		return errors.New("--kid, --issuer and --audience go with --key (without --key the development key and its issuer and audience are used)")
	}
	if o.keyFile != "" && (o.keyID == "" || o.issuer == "" || o.audience == "") {
		return errors.New("--key needs --kid, --issuer and --audience: the key_id, issuer and audience of the trust entry that verifies this token")
	}
	if o.ttl <= 0 {
		return fmt.Errorf("--ttl %s: the lifetime must be positive", o.ttl)
	}
	return nil
}

// readOwnKey reads the --key file (as carefully as every file the CLI
// reads) and names the algorithm its key signs with.
func readOwnKey(path string) (crypto.Signer, string, error) {
	raw, err := safefile.ReadFile(path, verify.MaxKeyFileBytes)
	if err != nil {
		return nil, "", fmt.Errorf("--key: %w", err)
	}
	priv, err := verify.LoadPrivateKeyPEM(raw)
	if err != nil {
		return nil, "", fmt.Errorf("--key %s: %w", path, err)
	}
	switch k := priv.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve == elliptic.P256() {
			return priv, "ES256", nil
		}
	case ed25519.PrivateKey:
		return priv, "EdDSA", nil
	}
	return nil, "", fmt.Errorf("--key %s: only ECDSA P-256 (ES256) and Ed25519 (EdDSA) keys are supported", path)
}

// mint signs claims as the kind's token issued at iat: it adds iss, aud,
// iat, exp (iat + --ttl) and a fresh jti.
func (o *tokenOptions) mint(iat int64, claims map[string]any) ([]byte, error) {
	claims["iss"], claims["aud"] = o.signer.issuer, o.signer.audience
	claims["iat"], claims["exp"], claims["jti"] = iat, o.expiry(iat), newJTI()
	return token.Mint(o.signer.priv, o.signer.kid, o.signer.alg, o.kind.typ, claims)
}

func (o *tokenOptions) expiry(iat int64) int64 { return iat + int64(o.ttl/time.Second) }

// write writes the token to standard output.
func (o *tokenOptions) write(tok []byte) error {
	_, err := fmt.Fprintln(o.deps.stdout, string(tok))
	return err
}

// manifestRef is --manifest: the manifest whose hardware, budget or digest
// a token binds. Empty until load reads it.
type manifestRef struct {
	path   string
	doc    map[string]any
	digest string
}

func (m *manifestRef) addFlag(f *pflag.FlagSet, usage string) {
	f.StringVar(&m.path, "manifest", "", usage)
	readsFile(f, "manifest")
}

// load reads the manifest when --manifest is given.
func (m *manifestRef) load() error {
	if m.path == "" {
		return nil
	}
	raw, digest, err := safefile.ReadManifest(m.path, manifest.MaxBytes)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &m.doc); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	m.digest = digest
	return nil
}

// section is one object of the manifest (nil without --manifest).
func (m *manifestRef) section(name string) map[string]any {
	s, _ := m.doc[name].(map[string]any)
	return s
}

func newJTI() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
