package bundle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/itocompute/itogate/gatekeeper/policy"
)

// Source produces verified bundles.
type Source interface {
	// Fetch returns the current bundle, or nil and no error when it has not
	// changed since the last bundle Fetch returned. Errors are *Error.
	Fetch(ctx context.Context) (*Bundle, error)
	// String names the source for logs (never with credentials).
	String() string
}

// Embedded is the bundle compiled into the binary: unsigned, without
// revision ordering or age, for development (and, noted in the logs, for a
// production configuration that names no bundle).
type Embedded struct {
	fsys fs.FS
	mu   sync.Mutex
	done bool
}

// NewEmbedded returns the source of a bundle file tree, e.g.
// policies.Bundle().
func NewEmbedded(fsys fs.FS) *Embedded { return &Embedded{fsys: fsys} }

func (e *Embedded) String() string { return "embedded" }

// Fetch reads the tree the first time and reports no change afterwards.
func (e *Embedded) Fetch(context.Context) (*Bundle, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return nil, nil
	}
	b, digest, err := policy.ReadFS(e.fsys)
	if err != nil {
		return nil, fail(ReasonInvalid, "%v", err)
	}
	e.done = true
	rev := b.Manifest.Revision
	if rev == "" {
		rev = digest[:len("sha256:")+12]
	}
	return &Bundle{Parsed: b, Revision: rev, Digest: digest, Origin: "embedded"}, nil
}

// File is a signed bundle archive on disk, re-read on every Fetch: replace
// it atomically (write a new file, rename it over the old one) to publish.
type File struct {
	path     string
	verifier *Verifier
	mu       sync.Mutex
	last     string // digest of the last bundle returned
}

// NewFile returns the source of the archive at path.
func NewFile(path string, v *Verifier) *File { return &File{path: path, verifier: v} }

func (f *File) String() string { return "file " + f.path }

// Fetch reads and verifies the file unless its bytes are unchanged.
func (f *File) Fetch(context.Context) (*Bundle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	raw, err := readFile(f.path, f.verifier.MaxBytes())
	if err != nil {
		return nil, err
	}
	if Digest(raw) == f.last {
		return nil, nil
	}
	b, err := f.verifier.Verify(raw, f.path)
	if err != nil {
		return nil, err
	}
	f.last = b.Digest
	return b, nil
}

// Forget makes the next Fetch return the file even if it is unchanged.
func (f *File) Forget() {
	f.mu.Lock()
	f.last = ""
	f.mu.Unlock()
}

func readFile(path string, limit int64) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fail(ReasonFetch, "%v", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fail(ReasonFetch, "%v", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fail(ReasonFetch, "%s is not a regular file", path)
	}
	raw, err := io.ReadAll(io.LimitReader(fh, limit+1))
	if err != nil {
		return nil, fail(ReasonFetch, "%v", err)
	}
	if int64(len(raw)) > limit {
		return nil, fail(ReasonTooLarge, "%s is larger than %d bytes", path, limit)
	}
	return raw, nil
}

// Defaults of the bundle server client.
const (
	DefaultHTTPTimeout    = 30 * time.Second
	DefaultConnectTimeout = 5 * time.Second
)

// HTTPOptions configure an HTTP source.
type HTTPOptions struct {
	// URL of the bundle (http or https; no credentials in it).
	URL string
	// Verifier checks every download; its MaxBytes bounds the body.
	Verifier *Verifier
	// Timeout bounds one whole request, body included (default 30s).
	Timeout time.Duration
	// ConnectTimeout bounds the TCP connect and the TLS handshake (default 5s).
	ConnectTimeout time.Duration
	// Client replaces the default client (tests); Timeout still applies.
	Client *http.Client
}

// HTTP polls a bundle server with the OPA bundle protocol: GET with
// If-None-Match carrying the ETag of the last bundle returned; 304 means
// unchanged, 200 carries a bundle (and its ETag).
type HTTP struct {
	url      string
	display  string // url without query or fragment, for logs
	verifier *Verifier
	timeout  time.Duration
	client   *http.Client
	mu       sync.Mutex
	etag     string // of the last bundle returned
	last     string // its digest
}

// NewHTTP validates the options and returns the source.
func NewHTTP(opts HTTPOptions) (*HTTP, error) {
	if err := CheckURL(opts.URL); err != nil {
		return nil, err
	}
	if opts.Verifier == nil {
		return nil, errors.New("bundle: an HTTP source needs a verifier")
	}
	h := &HTTP{url: opts.URL, display: displayURL(opts.URL), verifier: opts.Verifier, timeout: opts.Timeout, client: opts.Client}
	if h.timeout <= 0 {
		h.timeout = DefaultHTTPTimeout
	}
	if h.client == nil {
		connect := opts.ConnectTimeout
		if connect <= 0 {
			connect = DefaultConnectTimeout
		}
		h.client = newClient(connect, h.timeout)
	}
	return h, nil
}

// CheckURL accepts an absolute http(s) URL without user information.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("bundle: url does not parse")
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return errors.New("bundle: url must be http or https")
	}
	if u.Host == "" {
		return errors.New("bundle: url without host")
	}
	if u.User != nil {
		return errors.New("bundle: url must not carry credentials")
	}
	return nil
}

func newClient(connect, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   connect,
		ResponseHeaderTimeout: timeout,
		MaxIdleConns:          2,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
				return errors.New("redirect from https to http refused")
			}
			return nil
		},
	}
}

func (h *HTTP) String() string { return "url " + h.display }

// displayURL drops the query and fragment, which may carry tokens.
func displayURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid url)"
	}
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	u.Fragment = ""
	return u.String()
}

// Fetch asks the server for a newer bundle.
func (h *HTTP) Fetch(ctx context.Context) (*Bundle, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url, nil)
	if err != nil {
		return nil, fail(ReasonFetch, "%v", err)
	}
	if h.etag != "" {
		req.Header.Set("If-None-Match", h.etag)
	}
	// The archive is gzip already; refuse transparent decompression so the
	// digest is that of the published file.
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("Accept", "application/gzip, application/vnd.openpolicyagent.bundles, application/octet-stream")
	req.Header.Set("Prefer", "modes=snapshot")
	req.Header.Set("User-Agent", "itogate")
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, fail(ReasonFetch, "%s", redact(err))
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotModified:
		if h.etag == "" {
			return nil, fail(ReasonFetch, "bundle server answered 304 without a cached bundle")
		}
		return nil, nil
	case http.StatusOK:
	default:
		return nil, fail(ReasonFetch, "bundle server answered %d", resp.StatusCode)
	}
	limit := h.verifier.MaxBytes()
	if resp.ContentLength > limit {
		return nil, fail(ReasonTooLarge, "bundle of %d bytes exceeds %d", resp.ContentLength, limit)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fail(ReasonFetch, "reading the bundle: %s", redact(err))
	}
	if int64(len(raw)) > limit {
		return nil, fail(ReasonTooLarge, "bundle exceeds %d bytes", limit)
	}
	etag := resp.Header.Get("ETag")
	if Digest(raw) == h.last {
		h.etag = etag
		return nil, nil
	}
	b, err := h.verifier.Verify(raw, h.display)
	if err != nil {
		return nil, err
	}
	h.etag, h.last = etag, b.Digest
	return b, nil
}

// Forget drops the cached ETag and digest: the next Fetch downloads and
// returns the bundle even if it is unchanged.
func (h *HTTP) Forget() {
	h.mu.Lock()
	h.etag, h.last = "", ""
	h.mu.Unlock()
}

// redact keeps a transport error's kind without echoing the whole URL (it
// has none with credentials, CheckURL sees to that, but query strings can
// carry tokens).
func redact(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Sprintf("%s: %v", ue.Op, ue.Err)
	}
	return err.Error()
}
