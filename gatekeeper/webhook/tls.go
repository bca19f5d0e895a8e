package webhook

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/itocompute/itogate/gatekeeper/safefile"
)

// CertReloader serves a certificate and key from files and picks up new
// ones when either file changes (cert-manager renews them in place by
// swapping a symlink in a mounted Secret). It checks the files at most once
// per CheckInterval, on a handshake; a pair that fails to load (half
// written, mismatched) is logged and the last good one stays in use.
type CertReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	now               func() time.Time

	mu        sync.Mutex
	cert      *tls.Certificate
	stamp     string // size and mtime of both files at the last load
	checkedAt time.Time
}

// CheckInterval bounds how often the files are looked at.
const CheckInterval = time.Second

// NewCertReloader loads the pair once; it fails when it cannot.
func NewCertReloader(certFile, keyFile string, log *slog.Logger) (*CertReloader, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &CertReloader{certFile: certFile, keyFile: keyFile, log: log, now: time.Now}
	stamp, err := r.stampFiles()
	if err != nil {
		return nil, fmt.Errorf("webhook tls: %w", err)
	}
	cert, err := r.load()
	if err != nil {
		return nil, fmt.Errorf("webhook tls: %w", err)
	}
	r.cert, r.stamp, r.checkedAt = &cert, stamp, r.now()
	return r, nil
}

// MaxPEMFileBytes bounds each certificate, key and CA file.
const MaxPEMFileBytes = 1 << 20

// load reads the pair with safefile.ReadMounted (regular files of at most
// MaxPEMFileBytes, symbolic links only within their own directory: a
// Secret volume) from one version of the volume.
func (r *CertReloader) load() (tls.Certificate, error) {
	var cert tls.Certificate
	err := safefile.Consistent(3, func(read func(string, int64) ([]byte, error)) error {
		certPEM, err := read(r.certFile, MaxPEMFileBytes)
		if err != nil {
			return err
		}
		keyPEM, err := read(r.keyFile, MaxPEMFileBytes)
		if err != nil {
			return err
		}
		cert, err = tls.X509KeyPair(certPEM, keyPEM)
		return err
	})
	return cert, err
}

func (r *CertReloader) stampFiles() (string, error) {
	var b bytes.Buffer
	for _, f := range []string{r.certFile, r.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%d/%d;", st.Size(), st.ModTime().UnixNano())
	}
	return b.String(), nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checkedAt) >= CheckInterval {
		r.checkedAt = now
		if stamp, err := r.stampFiles(); err == nil && stamp != r.stamp {
			cert, err := r.load()
			if err != nil {
				r.log.Error("webhook tls: new certificate files do not load; keeping the previous pair", "err", err)
			} else {
				r.cert, r.stamp = &cert, stamp
				r.log.Info("webhook tls: certificate reloaded", "cert_file", r.certFile)
			}
		}
	}
	return r.cert, nil
}

// TLSConfig is the webhook listener's configuration: TLS 1.2 or later, the
// reloading certificate and, with a client CA file, a required client
// certificate signed by it (the apiserver's, see docs/kubernetes.md).
func TLSConfig(r *CertReloader, clientCAFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
	if clientCAFile != "" {
		pem, err := safefile.ReadMounted(clientCAFile, MaxPEMFileBytes)
		if err != nil {
			return nil, fmt.Errorf("webhook tls: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("webhook tls: client CA: no certificate in the file")
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// The webhook listener's per-connection limits. The apiserver sends a
// review in one request of at most a few MiB and waits timeoutSeconds (5 s
// in the shipped configuration) for the answer.
const (
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout = 10 * time.Second
	// WriteTimeout bounds writing the response, from the end of the
	// request's headers.
	WriteTimeout = 10 * time.Second
	// IdleTimeout closes a kept-alive connection with no request for this
	// long.
	IdleTimeout = 90 * time.Second
	// MaxHeaderBytes bounds a request's header block.
	MaxHeaderBytes = 64 << 10
)

// NewServer is the webhook listener's HTTP server for handler over cfg:
// HTTP/1.1 only unless http2 (a client that offers h2 in ALPN gets
// http/1.1: HTTP/2's stream multiplexing is what the rapid-reset flood of
// CVE-2023-44487 abuses, and one review per request needs none of it), with
// the per-connection limits above. Serve it with ServeTLS(ln, "", "").
func NewServer(handler http.Handler, cfg *tls.Config, http2 bool, log *slog.Logger) *http.Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(http2)
	return &http.Server{
		Handler: handler, TLSConfig: cfg, Protocols: protocols,
		ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout, WriteTimeout: WriteTimeout,
		IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
