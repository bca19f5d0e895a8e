package token

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
)

// GenerateECDSA returns a new ECDSA P-256 key (ES256, cosign's default).
func GenerateECDSA() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// GenerateEd25519 returns a new Ed25519 key (EdDSA).
func GenerateEd25519() (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	return priv, err
}

// GenerateRSA returns a new RSA key of bits (2048, 3072 or 4096), as OPA's
// default bundle signing algorithm RS256 uses.
func GenerateRSA(bits int) (*rsa.PrivateKey, error) {
	switch bits {
	case 2048, 3072, 4096:
	default:
		return nil, fmt.Errorf("generate RSA: %d bits (2048, 3072 or 4096)", bits)
	}
	return rsa.GenerateKey(rand.Reader, bits)
}

// MarshalPrivateKeyPEM encodes priv as an unencrypted PKCS#8 "PRIVATE KEY"
// PEM block.
func MarshalPrivateKeyPEM(priv crypto.Signer) ([]byte, error) {
	return cryptoutils.MarshalPrivateKeyToPEM(priv)
}

// MarshalPublicKeyPEM encodes pub as a PKIX "PUBLIC KEY" PEM block, the
// format of cosign.pub.
func MarshalPublicKeyPEM(pub crypto.PublicKey) ([]byte, error) {
	return cryptoutils.MarshalPublicKeyToPEM(pub)
}

// WriteKeyPair writes priv to dir/<name>.key.pem (PKCS#8, mode 0600) and
// its public key to dir/<name>.pub.pem (PKIX, mode 0644), creating dir (mode
// 0700) if it does not exist. It refuses to
// overwrite either file. name must be a plain file name.
func WriteKeyPair(dir, name string, priv crypto.Signer) (privPath, pubPath string, err error) {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return "", "", fmt.Errorf("write key pair: bad name %q", name)
	}
	privPEM, err := MarshalPrivateKeyPEM(priv)
	if err != nil {
		return "", "", fmt.Errorf("write key pair: %w", err)
	}
	pubPEM, err := MarshalPublicKeyPEM(priv.Public())
	if err != nil {
		return "", "", fmt.Errorf("write key pair: %w", err)
	}
	// A missing directory is created for the owner only: it will hold a
	// private key. An existing one is used as it is.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("write key pair: %w", err)
	}
	privPath = filepath.Join(dir, name+".key.pem")
	pubPath = filepath.Join(dir, name+".pub.pem")
	if err := writeNew(privPath, privPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := writeNew(pubPath, pubPEM, 0o644); err != nil {
		return "", "", err
	}
	return privPath, pubPath, nil
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("write key pair: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write key pair: %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write key pair: %s: %w", path, err)
	}
	return f.Close()
}
