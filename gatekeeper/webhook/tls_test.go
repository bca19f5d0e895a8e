package webhook

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func writePair(t *testing.T, dir, cn string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{cn}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	// Write both, then rename into place, as a mounted Secret changes.
	for name, block := range map[string]*pem.Block{"tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "PRIVATE KEY", Bytes: kder}} {
		tmp := filepath.Join(dir, name+".tmp")
		if err := os.WriteFile(tmp, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

func leafCN(t *testing.T, r *CertReloader) string {
	t.Helper()
	c, err := r.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.Subject.CommonName
}

// TestCertReload: a rotated pair is served after the next check; a broken
// pair keeps the last good one.
func TestCertReload(t *testing.T) {
	dir := t.TempDir()
	writePair(t, dir, "first")
	r, err := NewCertReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	r.now = func() time.Time { return clock }
	writePair(t, dir, "second")
	if cn := leafCN(t, r); cn != "first" {
		t.Fatalf("reloaded before the check interval: %s", cn)
	}
	clock = clock.Add(CheckInterval)
	if cn := leafCN(t, r); cn != "second" {
		t.Fatalf("after rotation: %s, want second", cn)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), []byte("half written"), 0o600); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(CheckInterval)
	if cn := leafCN(t, r); cn != "second" {
		t.Fatalf("a broken pair replaced the good one: %s", cn)
	}
	if _, err := TLSConfig(r, filepath.Join(dir, "tls.key")); err == nil {
		t.Fatal("a client CA file without certificates was accepted")
	}
}
