package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/inert"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

func newSignCmd(stdout io.Writer) *cobra.Command {
	var keyFile, out string
	cmd := &cobra.Command{
		Use:   "sign --key KEY.pem MANIFEST",
		Short: "Sign a manifest (detached, cosign sign-blob compatible)",
		Long: `Sign the exact bytes of a manifest with an ECDSA P-256 or Ed25519 private key
(PKCS#8 PEM) and write the base64 signature, as "cosign sign-blob --key" does.
The manifest is read like the client reads it (no symlinks, regular file).
cosign's own encrypted key files are not read: sign those with cosign itself.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			raw, digest, err := safefile.ReadManifest(args[0], manifest.MaxBytes)
			if err != nil {
				return err
			}
			pemBytes, err := safefile.ReadFile(keyFile, 64<<10)
			if err != nil {
				return fmt.Errorf("key: %w", err)
			}
			priv, err := verify.LoadPrivateKeyPEM(pemBytes)
			if err != nil {
				return badInput(fmt.Errorf("key: %w", err))
			}
			sig, err := token.SignManifest(priv, raw)
			if err != nil {
				return err
			}
			if out == "" {
				out = args[0] + ".sig"
			}
			// Replaced, never written through: a symlink planted at the
			// output path is not followed (no other file is overwritten).
			if err := safefile.WriteFile(out, []byte(sig), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "signed %s (%s) → %s\n", inert.Text(args[0]), digest, inert.Text(out))
			return nil
		},
	}
	cmd.Flags().StringVar(&keyFile, "key", "", "private key PEM (PKCS#8; ECDSA P-256 or Ed25519)")
	cmd.Flags().StringVar(&out, "output-signature", "", "signature file (default MANIFEST.sig)")
	readsFile(cmd.Flags(), "key")
	annotate(cmd.Flags(), "output-signature", valueWrites)
	fileArgs(cmd)
	_ = cmd.MarkFlagRequired("key")
	return cmd
}

func newVerifyCmd(stdout io.Writer) *cobra.Command {
	var keyFiles []string
	var sigFile string
	cmd := &cobra.Command{
		Use:   "verify --key PUB.pem [--signature FILE] MANIFEST",
		Short: "Verify a manifest's signature and validate it against the schema",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			raw, digest, err := safefile.ReadManifest(args[0], manifest.MaxBytes)
			if err != nil {
				return err
			}
			var signers []verify.Signer
			for _, kf := range keyFiles {
				pem, err := safefile.ReadFile(kf, verify.MaxKeyFileBytes)
				if err != nil {
					return fmt.Errorf("%s: %w", kf, err)
				}
				pub, err := verify.LoadPublicKeyPEM(pem)
				if err != nil {
					return badInput(fmt.Errorf("%s: %w", kf, err))
				}
				signers = append(signers, verify.Signer{KeyID: kf, PublicKey: pub})
			}
			mv, err := verify.NewManifestVerifier(signers)
			if err != nil {
				return badInput(err)
			}
			if sigFile == "" {
				sigFile = args[0] + ".sig"
			}
			sig, err := safefile.ReadFile(sigFile, 4096)
			if err != nil {
				return fmt.Errorf("signature: %w", err)
			}
			keyID, err := mv.Verify(raw, strings.TrimSpace(string(sig)))
			if err != nil {
				fmt.Fprintf(stdout, "FAIL  %s  %s: the signature does not verify with the given key(s)\n", inert.Text(args[0]), digest)
				return exitError{exitVerifyFail}
			}
			if _, err := manifest.Parse(raw); err != nil {
				var me *manifest.Error
				if errors.As(err, &me) {
					fmt.Fprintf(stdout, "FAIL  %s  signature ok (%s) but %s: %s\n", inert.Text(args[0]), inert.Text(keyID), me.Code, inert.Text(me.Message))
					return exitError{exitVerifyFail}
				}
				return err
			}
			fmt.Fprintf(stdout, "OK    %s  %s  signed by %s, schema ito.training/v1 valid\n", inert.Text(args[0]), digest, inert.Text(keyID))
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&keyFiles, "key", nil, "public key PEM of a trusted signer (repeatable)")
	cmd.Flags().StringVar(&sigFile, "signature", "", "signature file (default MANIFEST.sig)")
	readsFile(cmd.Flags(), "key", "signature")
	fileArgs(cmd)
	_ = cmd.MarkFlagRequired("key")
	return cmd
}

func newKeygenCmd(stdout io.Writer) *cobra.Command {
	var dir, name, typ, keyID, jwksFrom, mergeJWKS string
	var jwks bool
	cmd := &cobra.Command{
		Use:   "keygen --name NAME [--type ecdsa|ed25519] [--dir DIR] [--jwks [--key-id KID]]",
		Short: "Generate a key pair (PKCS#8 private PEM 0600, PKIX public PEM, optionally a public JWKS)",
		Long: `Generate a key pair: NAME.key.pem (PKCS#8, mode 0600) and NAME.pub.pem (PKIX).

With --jwks it also writes NAME.jwks.json: a JSON Web Key Set holding the public
key with its kid (--key-id, default NAME), alg (ES256 for ecdsa, EdDSA for
ed25519) and use "sig" — what a trust.*.jwks_file, tickets.previous_jwks_file
or "itogate ticket verify --jwks" reads. No file is ever overwritten.

With --jwks-from PEM it generates nothing: it writes NAME.jwks.json holding the
public key of PEM (ECDSA P-256: ES256, Ed25519: EdDSA, RSA: RS256) with its
kid (--key-id, default NAME), and with --merge-jwks FILE every key of FILE
before it — the JWKS of a key rotation, old and new keys side by side.`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			if jwksFrom != "" {
				if keyID == "" {
					keyID = name
				}
				return jwksFromPEM(stdout, jwksFrom, mergeJWKS, filepath.Join(dir, name+".jwks.json"), keyID)
			}
			var priv crypto.Signer
			var err error
			switch typ {
			case "ecdsa":
				priv, err = token.GenerateECDSA()
			case "ed25519":
				priv, err = token.GenerateEd25519()
			default:
				return badInput(errors.New("--type must be ecdsa or ed25519"))
			}
			if err != nil {
				return err
			}
			if keyID == "" {
				keyID = name
			}
			privPath, pubPath, err := token.WriteKeyPair(dir, name, priv)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "private %s (keep secret)\npublic  %s\nfingerprint %s\n",
				inert.Text(privPath), inert.Text(pubPath), verify.Fingerprint(priv.Public()))
			if jwks {
				alg := map[string]string{"ecdsa": "ES256", "ed25519": "EdDSA"}[typ]
				path, err := writePublicJWKS(filepath.Join(dir, name+".jwks.json"), keyID, alg, priv.Public())
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout, "jwks    %s (kid %s, alg %s)\n", inert.Text(path), inert.Text(keyID), alg)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".", "output directory")
	annotate(cmd.Flags(), "dir", valueWrites)
	cmd.Flags().StringVar(&name, "name", "", "file stem: NAME.key.pem and NAME.pub.pem")
	cmd.Flags().StringVar(&typ, "type", "ecdsa", "ecdsa (P-256, ES256) or ed25519 (EdDSA)")
	cmd.Flags().BoolVar(&jwks, "jwks", false, "also write NAME.jwks.json, the public key as a JWKS")
	cmd.Flags().StringVar(&keyID, "key-id", "", "kid of the key in the JWKS (default NAME)")
	cmd.Flags().StringVar(&jwksFrom, "jwks-from", "", "write NAME.jwks.json from this public key PEM instead of generating a key")
	cmd.Flags().StringVar(&mergeJWKS, "merge-jwks", "", "with --jwks-from: keep every key of this JWKS in NAME.jwks.json too")
	readsFile(cmd.Flags(), "jwks-from", "merge-jwks")
	cmd.MarkFlagsMutuallyExclusive("jwks-from", "jwks")
	cmd.MarkFlagsMutuallyExclusive("jwks-from", "type")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

// jwksFromPEM writes path (never overwriting it): the keys of mergePath
// (if any) and the public key of pemPath with kid keyID and the algorithm
// its type implies.
func jwksFromPEM(stdout io.Writer, pemPath, mergePath, path, keyID string) error {
	pemBytes, err := safefile.ReadFile(pemPath, verify.MaxKeyFileBytes)
	if err != nil {
		return err
	}
	pub, err := verify.LoadPublicKeyPEM(pemBytes)
	if err != nil {
		return badInput(fmt.Errorf("--jwks-from %s: %w", pemPath, err))
	}
	var alg string
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		alg = "ES256"
	case ed25519.PublicKey:
		alg = "EdDSA"
	case *rsa.PublicKey:
		alg = "RS256"
	default:
		return badInput(fmt.Errorf("--jwks-from %s: a %T key has no JWS algorithm here", pemPath, k))
	}
	set, err := verify.KeySetFromPEM(keyID, alg, pemBytes)
	if err != nil {
		return badInput(fmt.Errorf("--jwks-from %s: %w", pemPath, err))
	}
	if mergePath != "" {
		raw, err := safefile.ReadFile(mergePath, verify.MaxKeyFileBytes)
		if err != nil {
			return err
		}
		old, err := verify.LoadJWKS(raw)
		if err != nil {
			return badInput(fmt.Errorf("--merge-jwks %s: %w", mergePath, err))
		}
		merged := jwk.NewSet()
		for i := range old.Len() {
			k, _ := old.Key(i)
			if kid, _ := k.KeyID(); kid == keyID {
				return badInput(fmt.Errorf("--merge-jwks %s already holds kid %q: give the new key another --key-id", mergePath, keyID))
			}
			if err := merged.AddKey(k); err != nil {
				return err
			}
		}
		k, _ := set.Key(0)
		if err := merged.AddKey(k); err != nil {
			return err
		}
		set = merged
	}
	raw, err := json.MarshalIndent(set, "", "  ")
	if err != nil {
		return err
	}
	if _, err := verify.LoadJWKS(raw); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644) // never overwrite
	if err != nil {
		return err
	}
	if _, err := f.Write(append(raw, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "jwks    %s (%d keys; added kid %s, alg %s, fingerprint %s)\n",
		inert.Text(path), set.Len(), inert.Text(keyID), alg, verify.Fingerprint(pub))
	return nil
}

// writePublicJWKS writes a one-key public JWKS (kid, alg, use "sig") to
// path, refusing to overwrite, and checks it reads back as a verification
// key set.
func writePublicJWKS(path, keyID, alg string, pub crypto.PublicKey) (string, error) {
	pemBytes, err := token.MarshalPublicKeyPEM(pub)
	if err != nil {
		return "", err
	}
	set, err := verify.KeySetFromPEM(keyID, alg, pemBytes)
	if err != nil {
		return "", err
	}
	raw, err := json.MarshalIndent(set, "", "  ")
	if err != nil {
		return "", err
	}
	if _, err := verify.LoadJWKS(raw); err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	if _, err := f.Write(append(raw, '\n')); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}
