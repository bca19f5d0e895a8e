package server_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestConflictStatusAndCodeAgree: a reused key with another request whose
// confirmation also belongs to another account answers 409 with the code
// IDEMPOTENCY_KEY_CONFLICT (it was 409 CONFIRMATION_ACCOUNT_MISMATCH: status and
// code disagreed); every violation is still listed.
func TestConflictStatusAndCodeAgree(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	f := h.fixture(t)
	h.allowed(t, f)
	conf := h.token(t, purposeConfirmation, func(c map[string]any) { c["sub"] = "acct_someone_else" })
	g := fixture{ent: f.ent, conf: conf, ref: h.deposit(t, conf), key: f.key}
	r := h.admit(t, h.body(t, g, nil))
	h.expect(t, r, want{http.StatusConflict, "IDEMPOTENCY_KEY_CONFLICT"})
	var codes []string
	e, _ := r.env["error"].(map[string]any)
	vs, _ := e["violations"].([]any)
	for _, v := range vs {
		codes = append(codes, v.(map[string]any)["code"].(string))
	}
	if !slices.Contains(codes, "IDEMPOTENCY_KEY_CONFLICT") || !slices.Contains(codes, "CONFIRMATION_ACCOUNT_MISMATCH") {
		t.Fatalf("violations %v, want both", codes)
	}
	h.finish(t)
}

// TestCompressedBodyIs415: a compressed body is refused as an unsupported
// media type, whether Content-Encoding says so or not — not 400 "not valid
// UTF-8".
func TestCompressedBodyIs415(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	f := h.fixture(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(h.body(t, f, nil))
	_ = zw.Close()
	unsupported := want{http.StatusUnsupportedMediaType, "REQUEST_CONTENT_TYPE_UNSUPPORTED"}
	for _, tc := range []struct{ name, encoding string }{{"Content-Encoding gzip", "gzip"}, {"gzip bytes without the header", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/admissions", "/v1/confirmations"} {
				bearer := h.callerTok
				if path == "/v1/confirmations" {
					bearer = h.depositorTok
				}
				req, _ := http.NewRequest(http.MethodPost, h.srv.URL+path, bytes.NewReader(gz.Bytes()))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+bearer)
				if tc.encoding != "" {
					req.Header.Set("Content-Encoding", tc.encoding)
				}
				h.expect(t, h.send(t, req), unsupported)
			}
		})
	}
	// "identity" is no encoding at all.
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/admissions", bytes.NewReader(h.body(t, f, nil)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "identity")
	req.Header.Set("Authorization", "Bearer "+h.callerTok)
	if r := h.send(t, req); r.status != http.StatusOK {
		t.Fatalf("identity encoding: %d %s", r.status, r.raw)
	}
	h.finish(t)
}

// TestDepositLogsNoReference: the server log names a deposit by its jti,
// never by the confirmation reference (the decision log masks it too).
func TestDepositLogsNoReference(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	f := h.fixture(t)
	if !strings.Contains(h.logs.String(), "confirmation deposited") || strings.Contains(h.logs.String(), f.ref) {
		t.Fatalf("deposit log line: %s", h.logs.String())
	}
	h.finish(t)
}

// TestBareRefusalsAreTheDocumented: net/http answers an unsupported
// Transfer-Encoding (501) and a malformed request target (400) before any
// handler runs, in plain text; docs/security.md lists them. This pins them
// so the list stays true.
func TestBareRefusalsAreTheDocumented(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	for _, tc := range []struct {
		name, raw string
		status    int
	}{
		{"Transfer-Encoding gzip", "POST /v1/admissions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501},
		{"malformed percent escape", "GET /v1/admissions/qa%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", h.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, tc.raw); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("%s: %d, want net/http's bare %d", tc.name, resp.StatusCode, tc.status)
			}
		})
	}
}
