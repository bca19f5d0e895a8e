package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/inert"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

func newBundleCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bundle",
		Short: "Check signed policy bundles (build them with make bundle; see bundles/README.md)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newBundleInspectCmd(stdout, stderr))
	return cmd
}

// bundleKeyFlags name the key a signed bundle archive is verified with,
// as the server's policy.bundle.keys do: bundle inspect and replay.
type bundleKeyFlags struct {
	keyFile   string
	keyID     string
	algorithm string
	scope     string
}

func (k *bundleKeyFlags) register(f *pflag.FlagSet) {
	f.StringVar(&k.keyFile, "verification-key", "", "PEM public key of the bundle signer (default: the development bundle key)")
	f.StringVar(&k.keyID, "key-id", "", "key id the bundle was signed with (required with --verification-key)")
	f.StringVar(&k.algorithm, "algorithm", "", "signature algorithm (RS256, PS256, ES256, EdDSA, ...; default: RS256 for an RSA key, ES256/ES384/ES512 for ECDSA, EdDSA for Ed25519)")
	f.StringVar(&k.scope, "scope", "", "required signature scope")
	readsFile(f, "verification-key")
}

// verifier is the bundle.Verifier of the flags: the one the server builds
// from its bundle keys (bundle.NewVerifier), so an archive is verified here
// exactly as before activation. Without --verification-key it trusts the
// PUBLISHED development key, says so on stderr, and dev is true. Errors are
// bad input.
func (k *bundleKeyFlags) verifier(stderr io.Writer) (v *bundle.Verifier, dev bool, err error) {
	var keys []bundle.Key
	switch {
	case k.keyFile == "":
		if k.keyID != "" {
			return nil, false, badInput(errors.New("--key-id needs --verification-key"))
		}
		keys, dev = []bundle.Key{bundle.DevKey()}, true
		fmt.Fprintln(stderr, "itogate: verifying with the PUBLISHED development bundle key (fixtures/keys); production refuses it")
	case k.keyID == "":
		return nil, false, badInput(errors.New("--verification-key needs --key-id (the kid the signer used)"))
	default:
		pem, err := safefile.ReadFile(k.keyFile, 64<<10)
		if err != nil {
			return nil, false, badInput(fmt.Errorf("verification key: %w", err))
		}
		alg := k.algorithm
		if alg == "" {
			if alg, err = keyAlgorithm(pem); err != nil {
				return nil, false, badInput(fmt.Errorf("verification key: %w (or give --algorithm)", err))
			}
		}
		keys = []bundle.Key{{ID: k.keyID, Algorithm: alg, PEM: pem}}
	}
	if v, err = bundle.NewVerifier(bundle.VerifierOptions{Keys: keys, Scope: k.scope}); err != nil {
		return nil, false, badInput(err) // the key given does not load
	}
	return v, dev, nil
}

// verifiedBundle reads the archive at path through the safe reader and
// verifies it with v (bundle.Verifier.Verify: limits, entries, signature,
// manifest). A refused archive is a *bundle.Error naming its reason.
func verifiedBundle(v *bundle.Verifier, path string) (*bundle.Bundle, error) {
	raw, err := safefile.ReadFile(path, v.MaxBytes())
	if err != nil {
		return nil, err
	}
	return v.Verify(raw, path)
}

// activatedEngine compiles b as the server activates it
// (bundle.Manager.Activate: facts model, required rules, age when maxAge is
// positive) and returns its engine, evaluating under deadline.
func activatedEngine(ctx context.Context, b *bundle.Bundle, maxAge, deadline time.Duration, now time.Time) (*policy.Engine, error) {
	m, err := bundle.NewManager(bundle.Options{MaxAge: maxAge, Deadline: deadline, Now: func() time.Time { return now }})
	if err != nil {
		return nil, err
	}
	if err := m.Activate(ctx, b); err != nil {
		return nil, err
	}
	return m.Engine(), nil
}

type bundleInspectOptions struct {
	bundleKeyFlags
	maxAge  time.Duration
	now     time.Time
	jsonOut bool

	path string
	v    *bundle.Verifier
	dev  bool
}

func newBundleInspectCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &bundleInspectOptions{}
	cmd := &cobra.Command{
		Use:   "inspect BUNDLE.tar.gz",
		Short: "Verify a bundle exactly as the server does and print its revision, age, key and digest",
		Long: `Verify a bundle archive exactly as itogate serve does before activating it:
limits, tar entries (no links, no path outside the root), the signature in
.signatures.json with the given key (every file listed and hashed, none
added), the .manifest (revision <YYYYMMDDTHHMMSSZ>[-label], signed
metadata.built_at, roots within "ito", Rego v1) and that the policy compiles.

Without --verification-key the PUBLISHED development bundle key is used.
With --max-age the bundle must also be younger than that. Exit status 0 when
it verifies, 1 when anything fails, 4 on bad input (a flag, a refused file).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.path, o.now = args[0], time.Now()
			var err error
			if o.v, o.dev, err = o.verifier(stderr); err != nil {
				return err
			}
			return o.run(cmd.Context(), stdout)
		},
	}
	f := cmd.Flags()
	o.register(f)
	f.DurationVar(&o.maxAge, "max-age", 0, "fail when the bundle was built longer ago than this")
	f.BoolVar(&o.jsonOut, "json", false, "print JSON")
	fileArgs(cmd)
	return cmd
}

func (o *bundleInspectOptions) run(ctx context.Context, w io.Writer) error {
	b, err := verifiedBundle(o.v, o.path)
	if err != nil {
		return err
	}
	modules := make([]string, 0, len(b.Parsed.Modules))
	for _, m := range b.Parsed.Modules {
		modules = append(modules, m.Path)
	}
	sort.Strings(modules)
	roots := []string{}
	if b.Parsed.Manifest.Roots != nil {
		roots = *b.Parsed.Manifest.Roots
	}
	// Compile it as the server would; a bundle without every gate or with a
	// compile error is not activated.
	if _, err := activatedEngine(ctx, b, o.maxAge, 0, o.now); err != nil {
		return err
	}
	age := o.now.Sub(b.BuiltAt).Truncate(time.Second)
	if o.jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{
			"revision": b.Revision, "built_at": b.BuiltAt.Format(time.RFC3339), "age_seconds": int64(age.Seconds()),
			"key_id": b.KeyID, "digest": b.Digest, "size": b.Size, "roots": roots, "modules": modules,
			"development_key": o.dev,
		})
	}
	t := inert.Text // the archive's strings and the path are from outside
	fmt.Fprintf(w, "ok        %s\nrevision  %s\nbuilt_at  %s (%s ago)\nsigned by %s\ndigest    %s\nsize      %d bytes\nroots     %s\nmodules   %d\n",
		t(o.path), t(b.Revision), b.BuiltAt.Format(time.RFC3339), age, t(b.KeyID), t(b.Digest), b.Size, t(fmt.Sprint(roots)), len(modules))
	return nil
}

// keyAlgorithm is the usual JWS algorithm of a PEM public key, for
// `bundle inspect` without --algorithm: RS256 (RSA; PS256 must be asked for),
// ES256/ES384/ES512 by curve, EdDSA.
func keyAlgorithm(pemBytes []byte) (string, error) {
	pub, err := verify.LoadPublicKeyPEM(pemBytes)
	if err != nil {
		return "", err
	}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return "RS256", nil
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return "ES256", nil
		case elliptic.P384():
			return "ES384", nil
		case elliptic.P521():
			return "ES512", nil
		}
	case ed25519.PublicKey:
		return "EdDSA", nil
	}
	return "", fmt.Errorf("no signature algorithm for a %T key", pub)
}
