package verify

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/sigstore/sigstore/pkg/cryptoutils"

	"github.com/itocompute/itogate/gatekeeper/strictjson"
)

// MaxKeyFileBytes bounds a PEM or JWKS document: 1 MiB.
const MaxKeyFileBytes = 1 << 20

// minRSABits is the smallest RSA modulus accepted for token keys.
const minRSABits = 2048

// checkAlgorithm reports whether alg is a signature algorithm this package
// accepts for JWTs and whether pub is a key of the matching type (and
// curve). HMAC and "none" are never accepted.
func checkAlgorithm(alg string, pub crypto.PublicKey) error {
	switch alg {
	case "ES256", "ES384", "ES512":
		k, ok := pub.(*ecdsa.PublicKey)
		if !ok {
			return fmt.Errorf("alg %s needs an ECDSA key, got %T", alg, pub)
		}
		want := map[string]elliptic.Curve{"ES256": elliptic.P256(), "ES384": elliptic.P384(), "ES512": elliptic.P521()}[alg]
		if k.Curve != want {
			return fmt.Errorf("alg %s needs curve %s", alg, want.Params().Name)
		}
		if _, err := k.ECDH(); err != nil { // rejects points not on the curve
			return fmt.Errorf("invalid ECDSA public key: %w", err)
		}
	case "EdDSA", "Ed25519":
		k, ok := pub.(ed25519.PublicKey)
		if !ok || len(k) != ed25519.PublicKeySize {
			return fmt.Errorf("alg %s needs an Ed25519 key, got %T", alg, pub)
		}
	case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
		k, ok := pub.(*rsa.PublicKey)
		if !ok {
			return fmt.Errorf("alg %s needs an RSA key, got %T", alg, pub)
		}
		if k.N.BitLen() < minRSABits {
			return fmt.Errorf("RSA key of %d bits is below %d", k.N.BitLen(), minRSABits)
		}
	default:
		return fmt.Errorf("alg %q is not accepted (asymmetric ES*, EdDSA/Ed25519, RS*, PS* only)", alg)
	}
	return nil
}

// LoadPublicKeyPEM parses exactly one PEM block of type "PUBLIC KEY" (PKIX,
// as cosign.pub and `openssl pkey -pubout` write it) holding an RSA (2048,
// 3072 or 4096 bits), ECDSA (P-256, P-384, P-521) or Ed25519 key. Leading
// or trailing whitespace is allowed; a second block, PEM headers, any other
// text, a private key or a certificate is an error. The error never contains
// the input.
func LoadPublicKeyPEM(data []byte) (crypto.PublicKey, error) {
	if len(data) > MaxKeyFileBytes {
		return nil, fmt.Errorf("public key PEM: larger than %d bytes", MaxKeyFileBytes)
	}
	trimmed := bytes.TrimSpace(data)
	if !bytes.HasPrefix(trimmed, []byte("-----BEGIN ")) {
		return nil, errors.New("public key PEM: does not start with a PEM block")
	}
	block, rest := pem.Decode(trimmed)
	if block == nil {
		return nil, errors.New("public key PEM: no valid PEM block")
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("public key PEM: data after the first PEM block (exactly one block allowed)")
	}
	if len(block.Headers) != 0 {
		return nil, errors.New("public key PEM: PEM headers are not allowed")
	}
	if block.Type != string(cryptoutils.PublicKeyPEMType) {
		return nil, fmt.Errorf("public key PEM: block type %q, want %q", block.Type, cryptoutils.PublicKeyPEMType)
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(trimmed)
	if err != nil {
		return nil, fmt.Errorf("public key PEM: %w", err)
	}
	if err := cryptoutils.ValidatePubKey(pub); err != nil {
		return nil, fmt.Errorf("public key PEM: %w", err)
	}
	if k, ok := pub.(*ecdsa.PublicKey); ok {
		if _, err := k.ECDH(); err != nil {
			return nil, fmt.Errorf("public key PEM: invalid ECDSA key: %w", err)
		}
	}
	return pub, nil
}

// LoadPrivateKeyPEM parses exactly one unencrypted PKCS#8 "PRIVATE KEY"
// PEM block (surrounding whitespace allowed) holding an ECDSA, Ed25519 or
// RSA key, as `itogate keygen` writes it: the key itogate signs its tickets
// with, and the keys the development tooling signs tokens and manifests
// with. The error never contains the input.
func LoadPrivateKeyPEM(data []byte) (crypto.Signer, error) {
	if len(data) > MaxKeyFileBytes {
		return nil, fmt.Errorf("private key PEM: larger than %d bytes", MaxKeyFileBytes)
	}
	trimmed := bytes.TrimSpace(data)
	block, rest := pem.Decode(trimmed)
	if block == nil || !bytes.HasPrefix(trimmed, []byte("-----BEGIN ")) {
		return nil, errors.New("private key PEM: no PEM block")
	}
	if len(bytes.TrimSpace(rest)) != 0 || len(block.Headers) != 0 {
		return nil, errors.New("private key PEM: exactly one block without headers expected")
	}
	if block.Type != string(cryptoutils.PrivateKeyPEMType) {
		return nil, fmt.Errorf("private key PEM: block type %q, want %q", block.Type, cryptoutils.PrivateKeyPEMType)
	}
	priv, err := cryptoutils.UnmarshalPEMToPrivateKey(trimmed, nil)
	if err != nil {
		return nil, errors.New("private key PEM: not a PKCS#8 private key")
	}
	s, ok := priv.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key PEM: %T is not a signer", priv)
	}
	return s, nil
}

// LoadPublicKeyPEMFile reads path (at most MaxKeyFileBytes) and parses it
// with LoadPublicKeyPEM.
func LoadPublicKeyPEMFile(path string) (crypto.PublicKey, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	pub, err := LoadPublicKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pub, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxKeyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxKeyFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, MaxKeyFileBytes)
	}
	return data, nil
}

// LoadJWKS parses a JSON Web Key Set of public signing keys. Every key must
// carry a non-empty, unique "kid" and an "alg" this package accepts that
// matches the key type (ES256/384/512 with the matching curve, EdDSA or
// Ed25519, RS*/PS* with at least 2048 bits); "use", when present, must be
// "sig". Private and symmetric keys are refused. Nothing is fetched: x5u or
// jku members are never followed. The document must be strict JSON
// (strictjson): a duplicate "keys", "alg" or "kid" member, which jwk.Parse
// would resolve last-wins, or trailing data is an error.
func LoadJWKS(data []byte) (jwk.Set, error) {
	if len(data) > MaxKeyFileBytes {
		return nil, fmt.Errorf("jwks: larger than %d bytes", MaxKeyFileBytes)
	}
	if _, err := strictjson.DecodeObject(data, maxJSONDepth); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	set, err := jwk.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	if _, err := indexKeys(set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	return set, nil
}

// KeySetFromPEM makes a one-key set from a PEM public key (see
// LoadPublicKeyPEM), with the configured key id and algorithm, for
// configurations that pin a PEM file instead of a JWKS.
func KeySetFromPEM(keyID, alg string, pemBytes []byte) (jwk.Set, error) {
	if keyID == "" {
		return nil, errors.New("key set from PEM: empty key id")
	}
	pub, err := LoadPublicKeyPEM(pemBytes)
	if err != nil {
		return nil, err
	}
	if err := checkAlgorithm(alg, pub); err != nil {
		return nil, fmt.Errorf("key %q: %w", keyID, err)
	}
	sa, ok := jwa.LookupSignatureAlgorithm(alg)
	if !ok {
		return nil, fmt.Errorf("key %q: unknown alg %q", keyID, alg)
	}
	key, err := jwk.Import(pub)
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", keyID, err)
	}
	for name, v := range map[string]any{jwk.KeyIDKey: keyID, jwk.AlgorithmKey: sa, jwk.KeyUsageKey: "sig"} {
		if err := key.Set(name, v); err != nil {
			return nil, fmt.Errorf("key %q: set %s: %w", keyID, name, err)
		}
	}
	set := jwk.NewSet()
	if err := set.AddKey(key); err != nil {
		return nil, fmt.Errorf("key %q: %w", keyID, err)
	}
	return set, nil
}

// Fingerprint identifies a public key: "sha256:" followed by the lowercase
// hex SHA-256 of its PKIX (SubjectPublicKeyInfo) DER encoding. A private key
// (anything with a Public() method) is fingerprinted by its public half. A
// key that has no PKIX encoding yields "".
func Fingerprint(pub crypto.PublicKey) string {
	if p, ok := pub.(interface{ Public() crypto.PublicKey }); ok {
		pub = p.Public()
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// FingerprintJWK is Fingerprint of the public half of a JWK.
func FingerprintJWK(key jwk.Key) (string, error) {
	pk, err := key.PublicKey()
	if err != nil {
		return "", fmt.Errorf("fingerprint: %w", err)
	}
	var raw any
	if err := jwk.Export(pk, &raw); err != nil {
		return "", fmt.Errorf("fingerprint: %w", err)
	}
	fp := Fingerprint(raw)
	if fp == "" {
		return "", fmt.Errorf("fingerprint: %T has no PKIX encoding", raw)
	}
	return fp, nil
}

// resolvedKey is one configured verification key.
type resolvedKey struct {
	alg jwa.SignatureAlgorithm
	pub crypto.PublicKey
}

// indexKeys validates every key of set and indexes them by kid.
func indexKeys(set jwk.Set) (map[string]resolvedKey, error) {
	if set == nil || set.Len() == 0 {
		return nil, errors.New("no keys")
	}
	out := make(map[string]resolvedKey, set.Len())
	for i := range set.Len() {
		key, ok := set.Key(i)
		if !ok {
			return nil, fmt.Errorf("key #%d: missing", i)
		}
		kid, ok := key.KeyID()
		if !ok || kid == "" {
			return nil, fmt.Errorf("key #%d: no kid", i)
		}
		if _, dup := out[kid]; dup {
			return nil, fmt.Errorf("key %q: duplicate kid", kid)
		}
		rk, err := resolveKey(key)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", kid, err)
		}
		out[kid] = rk
	}
	return out, nil
}

func resolveKey(key jwk.Key) (resolvedKey, error) {
	if key.KeyType() == jwa.OctetSeq() {
		return resolvedKey{}, errors.New("symmetric keys are not accepted")
	}
	private, err := jwk.IsPrivateKey(key)
	if err != nil {
		return resolvedKey{}, err
	}
	if private {
		return resolvedKey{}, errors.New("private key in a verification key set")
	}
	if use, ok := key.KeyUsage(); ok && use != "sig" {
		return resolvedKey{}, fmt.Errorf("use %q, want \"sig\"", use)
	}
	ka, ok := key.Algorithm()
	if !ok || ka.String() == "" {
		return resolvedKey{}, errors.New("no alg (the algorithm comes from configuration, never from a token)")
	}
	sa, ok := jwa.LookupSignatureAlgorithm(ka.String())
	if !ok {
		return resolvedKey{}, fmt.Errorf("alg %q is not a signature algorithm", ka.String())
	}
	var raw any
	if err := jwk.Export(key, &raw); err != nil {
		return resolvedKey{}, err
	}
	if err := checkAlgorithm(sa.String(), raw); err != nil {
		return resolvedKey{}, err
	}
	return resolvedKey{alg: sa, pub: raw}, nil
}
