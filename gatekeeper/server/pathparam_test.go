package server_test

import (
	"net/http"
	"testing"
)

// TestStatusKeyPercentEncoded: after admitting key "qa:run.1", the status
// route answers for every encoding a client library sends — raw, %3A,
// %3a, every byte encoded — and a decoded slash or NUL is refused with 400
// REQUEST_INVALID, never 404. (A malformed escape such as %zz never reaches
// a handler: net/http refuses the request line with its own bare 400.)
func TestStatusKeyPercentEncoded(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	f := h.fixture(t)
	f.key = "qa:run.1"
	h.allowed(t, f)
	for _, path := range []string{
		"/v1/admissions/qa:run.1",
		"/v1/admissions/qa%3Arun.1", // Python quote(key, safe=""), encodeURIComponent
		"/v1/admissions/qa%3arun.1",
		"/v1/admissions/%71%61%3A%72%75%6E%2E%31",
	} {
		req, err := http.NewRequest(http.MethodGet, h.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = path // sent as written
		req.Header.Set("Authorization", "Bearer "+h.callerTok)
		r := h.send(t, req)
		if r.status != http.StatusOK || r.data()["idempotency_key"] != "qa:run.1" {
			t.Fatalf("GET %s: %d %s", path, r.status, r.raw)
		}
	}
	for _, path := range []string{"/v1/admissions/qa%2Frun.1", "/v1/admissions/qa%00run.1", "/v1/admissions/qa%253Arun.1"} {
		req, err := http.NewRequest(http.MethodGet, h.srv.URL+"/v1/admissions/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = path
		req.Header.Set("Authorization", "Bearer "+h.callerTok)
		h.expect(t, h.send(t, req), want{http.StatusBadRequest, "REQUEST_INVALID"})
	}
	h.finish(t)
}
