package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/internal/patience"
)

// A server that commits and then loses the response: the client must find the
// stored admission by key and never POST again.
func TestLostResponseQueriesStatusBeforeRetry(t *testing.T) {
	t.Parallel()
	var posts, gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost:
			posts.Add(1)
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close() // committed, response lost
		case http.MethodGet:
			gets.Add(1)
			if r.URL.Path != "/v1/admissions/run-1" || r.Header.Get("Authorization") != "Bearer tok" {
				t.Errorf("status request %s %q", r.URL.Path, r.Header.Get("Authorization"))
			}
			w.WriteHeader(200)
			_, _ = w.Write([]byte(`{"ok":true,"data":{"run_id":"run_x"}}`))
		}
	}))
	defer srv.Close()
	c, err := New(Options{BaseURL: srv.URL, Bearer: "tok", Timeout: patience.Deadline})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Admit(context.Background(), api.AdmissionRequest{Action: "train.create", IdempotencyKey: "run-1", Manifest: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Recovered || resp.Status != 200 || posts.Load() != 1 || gets.Load() != 1 {
		t.Fatalf("recovered=%v status=%d posts=%d gets=%d; want the stored answer after one POST",
			resp.Recovered, resp.Status, posts.Load(), gets.Load())
	}
}

// A server that drops the request before committing: status says 404, so the
// client retries the POST and gets the answer.
func TestNothingCommittedRetries(t *testing.T) {
	t.Parallel()
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"ok":false,"error":{"code":"ADMISSION_NOT_FOUND"}}`))
			return
		}
		if posts.Add(1) == 1 {
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close()
			return
		}
		w.WriteHeader(200)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	c, _ := New(Options{BaseURL: srv.URL, Bearer: "tok"})
	resp, err := c.Admit(context.Background(), api.AdmissionRequest{Action: "train.create", IdempotencyKey: "run-2"})
	if err != nil || resp.Status != 200 || resp.Recovered || posts.Load() != 2 {
		t.Fatalf("resp=%+v err=%v posts=%d", resp, err, posts.Load())
	}
}

// A definite answer (even a 503 deny) is returned as is, never retried.
func TestDefiniteAnswerIsNotRetried(t *testing.T) {
	t.Parallel()
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.WriteHeader(503)
		_, _ = w.Write([]byte(`{"ok":false,"error":{"code":"LEDGER_UNAVAILABLE"}}`))
	}))
	defer srv.Close()
	c, _ := New(Options{BaseURL: srv.URL, Bearer: "tok"})
	resp, err := c.Admit(context.Background(), api.AdmissionRequest{IdempotencyKey: "k"})
	if err != nil || resp.Status != 503 || posts.Load() != 1 {
		t.Fatalf("resp=%+v err=%v posts=%d", resp, err, posts.Load())
	}
}

func TestNewRefusesCredentialsInURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"http://user:pw@host", "ftp://host", "host:80", ""} {
		if _, err := New(Options{BaseURL: u}); err == nil {
			t.Errorf("%q accepted", u)
		}
	}
}

func TestDepositRef(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/confirmations" || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %s %q", r.URL.Path, r.Header.Get("Content-Type"))
		}
		if r.Header.Get("Authorization") == "Bearer good" {
			w.WriteHeader(201)
			_, _ = w.Write([]byte(`{"ok":true,"data":{"confirmation_ref":"cfr_0123456789abcdef0123456789abcdef"}}`))
			return
		}
		w.WriteHeader(401)
		_, _ = w.Write([]byte(`{"ok":false,"error":{"code":"DEPOSITOR_UNAUTHENTICATED"}}`))
	}))
	defer srv.Close()
	good, _ := New(Options{BaseURL: srv.URL, Bearer: "good", Attempts: 1})
	if ref, err := good.DepositRef(context.Background(), "tok"); err != nil || ref != "cfr_0123456789abcdef0123456789abcdef" {
		t.Fatalf("DepositRef = %q, %v", ref, err)
	}
	bad, _ := New(Options{BaseURL: srv.URL, Bearer: "bad", Attempts: 1})
	if ref, err := bad.DepositRef(context.Background(), "tok"); err == nil || ref != "" ||
		!strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "DEPOSITOR_UNAUTHENTICATED") {
		t.Fatalf("DepositRef = %q, %v", ref, err)
	}
}

// TestRevocationRoutes: each revocation goes to its route with its bearer
// and its wire body, once, and the answer comes back unchanged.
func TestRevocationRoutes(t *testing.T) {
	t.Parallel()
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+" "+string(body))
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	c, _ := New(Options{BaseURL: srv.URL, Bearer: "rev"})
	resp, err := c.Revoke(context.Background(), api.RevocationRequest{Kind: "booking", Subject: "bk_1", ExpiresAt: 9, Reason: "r"})
	if err != nil || resp.Status != 201 || string(resp.Body) != `{"ok":true}` {
		t.Fatalf("Revoke = %+v, %v", resp, err)
	}
	if _, err := c.RevokeConfirmation(context.Background(), api.ConfirmationRevocationRequest{Ref: "cfr_1"}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`POST /v1/revocations Bearer rev {"kind":"booking","subject":"bk_1","expires_at":9,"reason":"r"}`,
		`POST /v1/confirmations/revocations Bearer rev {"ref":"cfr_1"}`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("requests\n%q\nwant\n%q", got, want)
	}
}
