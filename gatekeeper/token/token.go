// Package token mints development tokens, generates key pairs and signs
// manifests. It is dev tooling and test support (itogate keygen, token,
// sign); production tokens come from the canonical backend and the
// confirmation authority, and production manifest signatures from
// `cosign sign-blob`.
package token

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/sigstore/sigstore/pkg/signature"
)

// Mint signs claims as a compact JWS whose protected header holds exactly
// alg, kid and (when typ is non-empty) typ. alg is a JWA name such as
// "ES256", "EdDSA" or "RS256" and must suit priv; "none" and HMAC are
// refused. Claims are encoded with encoding/json, so NumericDate claims
// (iat, exp, nbf) should be int64 Unix seconds.
func Mint(priv crypto.Signer, keyID, alg, typ string, claims map[string]any) ([]byte, error) {
	if priv == nil {
		return nil, errors.New("mint: nil key")
	}
	if keyID == "" {
		return nil, errors.New("mint: empty key id")
	}
	if strings.EqualFold(alg, "none") || strings.HasPrefix(strings.ToUpper(alg), "HS") {
		return nil, fmt.Errorf("mint: alg %q is refused", alg)
	}
	sa, ok := jwa.LookupSignatureAlgorithm(alg)
	if !ok {
		return nil, fmt.Errorf("mint: unknown alg %q", alg)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return nil, fmt.Errorf("mint: encode claims: %w", err)
	}
	hdr := jws.NewHeaders()
	if err := hdr.Set(jws.KeyIDKey, keyID); err != nil {
		return nil, fmt.Errorf("mint: %w", err)
	}
	if typ != "" {
		if err := hdr.Set(jws.TypeKey, typ); err != nil {
			return nil, fmt.Errorf("mint: %w", err)
		}
	}
	signed, err := jws.Sign(payload, jws.WithKey(sa, priv, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		return nil, fmt.Errorf("mint: %w", err)
	}
	return signed, nil
}

// SignManifest signs the exact manifest bytes and returns the standard
// base64 signature, byte for byte what `cosign sign-blob --key` writes to
// --output-signature (without a trailing newline): for an ECDSA P-256 key,
// an ASN.1 DER signature over SHA-256 of the bytes; for an Ed25519 key, the
// 64-byte signature over the bytes. Other keys are refused, since
// verify.ManifestVerifier accepts only these two.
func SignManifest(priv crypto.Signer, manifest []byte) (string, error) {
	switch k := priv.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return "", errors.New("sign manifest: ECDSA key is not on curve P-256")
		}
	case ed25519.PrivateKey:
	default:
		return "", fmt.Errorf("sign manifest: key type %T is not accepted (ECDSA P-256 or Ed25519)", priv)
	}
	s, err := signature.LoadSigner(priv, crypto.SHA256)
	if err != nil {
		return "", fmt.Errorf("sign manifest: %w", err)
	}
	sig, err := s.SignMessage(bytes.NewReader(manifest))
	if err != nil {
		return "", fmt.Errorf("sign manifest: %w", err)
	}
	return base64.StdEncoding.EncodeToString(sig), nil
}
