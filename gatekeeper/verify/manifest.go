package verify

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"encoding/asn1"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/sigstore/sigstore/pkg/signature"
)

// MaxSignatureChars bounds the base64 signature string given to
// ManifestVerifier.Verify: 1 KiB (an ECDSA P-256 signature is at most 96
// characters, an Ed25519 one 88).
const MaxSignatureChars = 1 << 10

// Signer is one pinned manifest signer: an ECDSA P-256 or Ed25519 public
// key, as cosign.pub holds it (see LoadPublicKeyPEM), and the id reported
// when it verifies.
type Signer struct {
	KeyID     string
	PublicKey crypto.PublicKey
}

// ManifestVerifier verifies detached signatures over the exact manifest
// bytes, in the format `cosign sign-blob --key` writes (key mode, no
// transparency log): standard base64 of an ASN.1 DER ECDSA signature over
// SHA-256 of the bytes, or of a 64-byte Ed25519 signature over the bytes
// themselves. It is safe for concurrent use and never performs I/O.
type ManifestVerifier struct {
	signers []pinnedSigner
}

type pinnedSigner struct {
	keyID    string
	verifier signature.Verifier
	// der: the signer is ECDSA and takes only ASN.1 DER signatures.
	// sigstore's ECDSA verifier also accepts raw r||s (IEEE P1363); cosign
	// sign-blob writes DER, and one encoding per signature is the contract.
	der bool
}

// NewManifestVerifier pins signers, which must be non-empty with unique,
// non-empty key ids. Only ECDSA P-256 (verified with SHA-256) and Ed25519
// keys are accepted.
func NewManifestVerifier(signers []Signer) (*ManifestVerifier, error) {
	if len(signers) == 0 {
		return nil, errors.New("manifest verifier: at least one signer is required")
	}
	v := &ManifestVerifier{}
	seen := map[string]bool{}
	for i, s := range signers {
		if s.KeyID == "" {
			return nil, fmt.Errorf("manifest verifier: signer #%d: empty key id", i)
		}
		if seen[s.KeyID] {
			return nil, fmt.Errorf("manifest verifier: signer %q: duplicate key id", s.KeyID)
		}
		seen[s.KeyID] = true
		sv, err := loadManifestVerifier(s.PublicKey)
		if err != nil {
			return nil, fmt.Errorf("manifest verifier: signer %q: %w", s.KeyID, err)
		}
		_, isECDSA := s.PublicKey.(*ecdsa.PublicKey)
		v.signers = append(v.signers, pinnedSigner{keyID: s.KeyID, verifier: sv, der: isECDSA})
	}
	return v, nil
}

func loadManifestVerifier(pub crypto.PublicKey) (signature.Verifier, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, errors.New("ECDSA key is not on curve P-256")
		}
		if _, err := k.ECDH(); err != nil {
			return nil, fmt.Errorf("invalid ECDSA key: %w", err)
		}
		return signature.LoadECDSAVerifier(k, crypto.SHA256)
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return nil, errors.New("invalid Ed25519 key length")
		}
		return signature.LoadED25519Verifier(k)
	default:
		return nil, fmt.Errorf("key type %T is not accepted (ECDSA P-256 or Ed25519)", pub)
	}
}

// Verify checks sig, the base64 string as cosign writes it (surrounding
// whitespace, such as a trailing newline, is ignored), over manifest, the
// exact bytes that were signed. It tries each pinned signer in order and
// returns the key id of the first that verifies.
//
// Failures are *Error with Purpose PurposeManifest: KindMalformed when sig
// is longer than MaxSignatureChars, empty, or not standard padded base64;
// KindSignature when no signer verifies it. ECDSA signers take only ASN.1
// DER, as cosign writes it: the same (r, s) as raw r||s is refused.
func (v *ManifestVerifier) Verify(manifest []byte, sig string) (keyID string, err error) {
	if len(sig) > MaxSignatureChars {
		return "", fail(PurposeManifest, KindMalformed, "signature exceeds the size limit")
	}
	sig = strings.TrimSpace(sig)
	if sig == "" {
		return "", fail(PurposeManifest, KindMalformed, "empty signature")
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(sig)
	if err != nil || strings.ContainsAny(sig, "\r\n") {
		return "", fail(PurposeManifest, KindMalformed, "signature is not standard base64")
	}
	der := isECDSASigDER(raw)
	for _, s := range v.signers {
		if s.der && !der {
			continue
		}
		if s.verifier.VerifySignature(bytes.NewReader(raw), bytes.NewReader(manifest)) == nil {
			return s.keyID, nil
		}
	}
	return "", fail(PurposeManifest, KindSignature, "signature does not verify with any pinned signer")
}

// isECDSASigDER reports whether sig is exactly one DER ECDSA-Sig-Value
// (SEQUENCE of two INTEGERs, minimally encoded, nothing after it).
func isECDSASigDER(sig []byte) bool {
	var rs struct{ R, S *big.Int }
	rest, err := asn1.Unmarshal(sig, &rs)
	return err == nil && len(rest) == 0
}
