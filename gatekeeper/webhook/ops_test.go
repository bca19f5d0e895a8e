package webhook_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/webhook"
)

// answer posts body to h and decodes the AdmissionReview it answers.
func answer(t *testing.T, h http.Handler, body []byte) (int, *admissionv1.AdmissionResponse, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return rec.Code, nil, rec.Body.String()
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("not a review: %s", rec.Body)
	}
	return rec.Code, out.Response, ""
}

// TestSizeCap: a review above webhook.max_review_bytes is denied
// REQUEST_TOO_LARGE (413) as a review the apiserver shows, its uid read
// from the first bytes; a body naming no uid there gets a plain HTTP 413.
func TestSizeCap(t *testing.T) {
	f := newFixture(t)
	rec := &recorder{}
	opts := f.opts
	opts.MaxReviewBytes, opts.Observer = 4096, rec
	h, err := webhook.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	j := job("team-a", "big", "uid-big", f.ticket, 1, 8)
	j["metadata"].(map[string]any)["labels"] = map[string]any{"filler": strings.Repeat("<", 1000)}
	// The apiserver's encoding: request.uid first.
	obj, _ := json.Marshal(j)
	body := []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"req-big",` +
		`"kind":{"group":"batch","version":"v1","kind":"Job"},"operation":"CREATE","namespace":"team-a","object":` +
		string(obj) + `}}`)
	if len(body) <= 4096 {
		t.Fatalf("the body is %d bytes, not above the cap", len(body))
	}
	code, r, _ := answer(t, h, body)
	if code != http.StatusOK || r.Allowed || string(r.UID) != "req-big" || r.Result.Code != http.StatusRequestEntityTooLarge ||
		r.Result.Message != "REQUEST_TOO_LARGE: the AdmissionReview is larger than the webhook's cap of 4096 bytes (webhook.max_review_bytes)" {
		t.Fatalf("HTTP %d %+v", code, r)
	}
	if _, err := f.store.WorkloadBinding(t.Context(), f.runID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a refused review bound the run: %v", err)
	}
	// The same object within the default cap is decided.
	wantAllowed(t, post(t, f.h, "batch", "v1", "Job", j, true))
	// No uid in the first 4 KiB: no review to answer.
	code, _, text := answer(t, h, append([]byte(`{"kind":"AdmissionReview","pad":"`+strings.Repeat("x", 5000)+`",`), body[1:]...))
	if code != http.StatusRequestEntityTooLarge || !strings.HasPrefix(text, "REQUEST_TOO_LARGE: ") {
		t.Fatalf("no uid: HTTP %d %s", code, text)
	}
	want := []observed{{webhook.ResultDenied, "REQUEST_TOO_LARGE"}, {webhook.ResultInvalid, "REQUEST_TOO_LARGE"}}
	if len(rec.got) != 2 || rec.got[0] != want[0] || rec.got[1] != want[1] {
		t.Fatalf("observed %v, want %v", rec.got, want)
	}
}

// deciderFunc is a Decider from a function.
type deciderFunc func(context.Context, map[string]any) (policy.WorkloadDecision, error)

func (d deciderFunc) DecideWorkload(ctx context.Context, in map[string]any) (policy.WorkloadDecision, error) {
	return d(ctx, in)
}

// TestPanicDenies: a panic inside a review is answered denied
// INTERNAL_ERROR (500) with the request's uid, counted once as a panic and
// once as a denied review; the handler keeps serving.
func TestPanicDenies(t *testing.T) {
	f := newFixture(t)
	rec := &recorder{}
	opts := f.opts
	opts.Observer = rec
	var boom bool
	engine := f.opts.Policy()
	opts.Policy = func() webhook.Decider {
		return deciderFunc(func(ctx context.Context, in map[string]any) (policy.WorkloadDecision, error) {
			if boom {
				var m map[string]int
				m["x"]++ // a nil-map write: a runtime panic, as a bug would raise
			}
			return engine.DecideWorkload(ctx, in)
		})
	}
	h, err := webhook.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	boom = true
	r := post(t, h, "batch", "v1", "Job", job("team-a", "train", "uid-job", f.ticket, 1, 8), false)
	if r.Allowed || r.Result.Code != http.StatusInternalServerError ||
		r.Result.Message != "INTERNAL_ERROR: the review failed inside itogate; denied" {
		t.Fatalf("panic answered %+v", r.Result)
	}
	boom = false
	wantAllowed(t, post(t, h, "batch", "v1", "Job", job("team-a", "train", "uid-job", f.ticket, 1, 8), false))
	if rec.panics != 1 || len(rec.got) != 2 || rec.got[0] != (observed{webhook.ResultDenied, "INTERNAL_ERROR"}) {
		t.Fatalf("panics %d, observed %v", rec.panics, rec.got)
	}
}

// TestPolicyWarnings: the decision's warnings are the response's, as
// "CODE: message", on an allow and on a deny; a control character or an
// overlong text cannot make the apiserver's Warning header invalid.
func TestPolicyWarnings(t *testing.T) {
	f := newFixture(t)
	for _, allow := range []bool{true, false} {
		opts := f.opts
		opts.Policy = func() webhook.Decider {
			return deciderFunc(func(context.Context, map[string]any) (policy.WorkloadDecision, error) {
				d := policy.WorkloadDecision{Bind: "none", Decision: policy.Decision{Allow: allow, Warnings: []api.Finding{
					{Code: "WORKLOAD_SOON", Message: "line one\nline two"},
					{Code: "WORKLOAD_LONG", Message: strings.Repeat("é", 300)},
				}}}
				if !allow {
					d.Violations = []api.Finding{{Code: "WORKLOAD_TICKET_MISSING", Message: "no ticket"}}
				}
				return d, nil
			})
		}
		h, err := webhook.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		r := post(t, h, "", "v1", "Pod", pod("team-a", "p", "uid-p", "", "", 8), false)
		if r.Allowed != allow || len(r.Warnings) != 2 || r.Warnings[0] != "WORKLOAD_SOON: line one line two" ||
			len([]rune(r.Warnings[1])) != 256 || !strings.HasPrefix(r.Warnings[1], "WORKLOAD_LONG: éé") || !strings.HasSuffix(r.Warnings[1], "…") {
			t.Fatalf("allow=%v: %v %q", allow, r.Allowed, r.Warnings)
		}
	}
}

// TestWarnEndpoint: the warn endpoint decides as /validate does, answers
// allowed with the denial as warnings, counts it warned, and binds
// nothing; what enforcement allows it allows without a warning.
func TestWarnEndpoint(t *testing.T) {
	f := newFixture(t)
	rec := &recorder{}
	opts := f.opts
	opts.Observer = rec
	h, err := webhook.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	warn := h.Warn()
	r := post(t, warn, "", "v1", "Pod", pod("team-a", "p", "uid-p", "", "", 8), false)
	if !r.Allowed || r.Result != nil || len(r.Warnings) != 1 ||
		r.Warnings[0] != webhook.WarnPrefix+"WORKLOAD_TICKET_MISSING: 8 GPUs requested without an admission ticket (annotation itogate.io/ticket)" {
		t.Fatalf("warn endpoint: %+v", r)
	}
	r = post(t, warn, "batch", "v1", "Job", job("team-a", "train", "uid-job", f.ticket, 2, 8), false)
	if !r.Allowed || len(r.Warnings) != 0 {
		t.Fatalf("a valid Job: %+v", r)
	}
	if _, err := f.store.WorkloadBinding(t.Context(), f.runID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the warn endpoint bound the run: %v", err)
	}
	// A ledger fault is a warning too: warn mode never refuses.
	f.store.Close()
	r = post(t, warn, "batch", "v1", "Job", job("team-a", "train", "uid-job", f.ticket, 2, 8), false)
	if !r.Allowed || len(r.Warnings) != 1 || !strings.HasPrefix(r.Warnings[0], webhook.WarnPrefix+"LEDGER_UNAVAILABLE: ") {
		t.Fatalf("ledger down: %+v", r)
	}
	want := []observed{{webhook.ResultWarned, "WORKLOAD_TICKET_MISSING"}, {webhook.ResultAllowed, ""},
		{webhook.ResultWarned, "LEDGER_UNAVAILABLE"}}
	if len(rec.got) != 3 || rec.got[0] != want[0] || rec.got[1] != want[1] || rec.got[2] != want[2] {
		t.Fatalf("observed %v, want %v", rec.got, want)
	}
}

// TestServerHTTP1Only: the webhook listener answers a client offering h2
// with HTTP/1.1 (and with HTTP/2 only when configured to), and refuses a
// header block above MaxHeaderBytes.
func TestServerHTTP1Only(t *testing.T) {
	dir := t.TempDir()
	writeTestPair(t, dir)
	certs, err := webhook.NewCertReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := webhook.TLSConfig(certs, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, h2 := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := webhook.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
			cfg.Clone(), h2, nil)
		go func() { _ = srv.ServeTLS(ln, "", "") }()
		client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}}} //nolint:gosec // a test's own server
		resp, err := client.Get("https://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := "HTTP/1.1"
		if h2 {
			want = "HTTP/2.0"
		}
		if resp.Proto != want {
			t.Errorf("http2=%v: negotiated %s, want %s", h2, resp.Proto, want)
		}
		if !h2 {
			req, _ := http.NewRequest(http.MethodGet, "https://"+ln.Addr().String()+"/", nil)
			req.Header.Set("X-Big", strings.Repeat("a", webhook.MaxHeaderBytes+4096))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("a header block above MaxHeaderBytes: HTTP %d", resp.StatusCode)
			}
		}
		if srv.ReadHeaderTimeout != webhook.ReadHeaderTimeout || srv.IdleTimeout != webhook.IdleTimeout {
			t.Errorf("limits %v %v", srv.ReadHeaderTimeout, srv.IdleTimeout)
		}
		_ = srv.Close()
	}
}

// writeTestPair writes a self-signed pair for 127.0.0.1 as tls.crt and tls.key.
func writeTestPair(t *testing.T, dir string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	for name, block := range map[string]*pem.Block{"tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "PRIVATE KEY", Bytes: kder}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
