package server_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/server"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

func getRaw(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

func ticketOf(t *testing.T, env map[string]any) string {
	t.Helper()
	d, _ := env["data"].(map[string]any)
	tk, _ := d["ticket"].(string)
	if tk == "" {
		t.Fatalf("no data.ticket in %v", env)
	}
	return tk
}

// TestTicketOnAllowReplayAndStatus: an allowed train.create carries a ticket
// that verifies with nothing but the JWKS the server publishes, with the
// admitted run, account and topology and an exp the ticket lifetime after
// its iat (5 min; the run declares 6 h, the booking term ends in 30 days). The
// replay and the status lookup hand back the very same ticket.
func TestTicketOnAllowReplayAndStatus(t *testing.T) {
	h := newHarness(t, nil)
	start := time.Now()
	body, key := fixtureRequest(t, h, "megatron-llama3-8b-h100-fp8", "122.02")
	status, env := post(t, h, "/v1/admissions", "application/json", callerToken(t, h), body)
	if status != 200 {
		t.Fatalf("status %d: %v", status, env)
	}
	raw := ticketOf(t, env)

	resp, jwks := getRaw(t, h.srv.URL+"/v1/tickets/jwks")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/jwk-set+json" {
		t.Fatalf("jwks: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	set, err := verify.LoadJWKS(jwks)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(jwks), `"d"`) {
		t.Fatal("the JWKS carries a private member")
	}
	v, err := ticket.NewVerifier(ticket.VerifierOptions{Issuer: trust.DevTicketIssuer, Keys: set})
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify([]byte(raw), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	d := env["data"].(map[string]any)
	if c.RunID != d["run_id"] || c.ID != d["decision_id"] || c.Account != scenario.Account || c.BookingID != scenario.Booking ||
		c.ManifestDigest != d["manifest_digest"] || c.Action != "train.create" || c.BundleRevision != d["bundle_revision"] {
		t.Fatalf("claims %+v do not name the admission %v", c, d)
	}
	if c.WorldSize != 8 || c.Nodes != 1 || c.GPUsPerNode != 8 || c.GPUType != "H100-SXM-80GB" || c.Region != "us-east-1" {
		t.Fatalf("topology %+v", c)
	}
	if lifetime := c.Expiry.Sub(c.IssuedAt); lifetime != ticket.DefaultLifetime {
		t.Fatalf("exp - iat = %v, want the 5 min ticket lifetime (the run declares 6 h)", lifetime)
	}
	if c.IssuedAt.Before(start.Truncate(time.Second)) || c.IssuedAt.After(time.Now()) {
		t.Fatalf("iat %v outside the request", c.IssuedAt)
	}

	// Same request, same key: the stored allow with the same ticket.
	status, env = post(t, h, "/v1/admissions", "application/json", callerToken(t, h), body)
	if status != 200 || ticketOf(t, env) != raw {
		t.Fatalf("replay: %d, same ticket %v", status, status == 200 && ticketOf(t, env) == raw)
	}
	req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/v1/admissions/"+key, nil)
	req.Header.Set("Authorization", "Bearer "+callerToken(t, h))
	sresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	sbody, _ := io.ReadAll(sresp.Body)
	if sresp.StatusCode != 200 || !strings.Contains(string(sbody), `"ticket":"`+raw+`"`) {
		t.Fatalf("status lookup: %d without the same ticket", sresp.StatusCode)
	}
	// The decision log never holds the ticket (a bearer capability).
	h.dl.Close()
	if strings.Contains(h.dlog.String(), raw) || strings.Contains(h.logs.String(), raw) {
		t.Fatal("the ticket reached a log")
	}
}

type failingSigner struct{}

func (failingSigner) Issue(ticket.Claims) (string, error) { return "", errors.New("hsm unreachable") }

// TestTicketSigningFailureDenies: an allow whose ticket cannot be signed is
// a coded 503 and writes nothing.
func TestTicketSigningFailureDenies(t *testing.T) {
	h := newHarness(t, func(o *admission.Options) { o.Tickets = failingSigner{} })
	body, key := fixtureRequest(t, h, "megatron-llama3-8b-h100-fp8", "122.02")
	status, env := post(t, h, "/v1/admissions", "application/json", callerToken(t, h), body)
	if status != 503 || errCode(env) != string(api.CodeTicketUnavailable) {
		t.Fatalf("status %d %v, want 503 %s", status, env["error"], api.CodeTicketUnavailable)
	}
	if _, err := h.store.Admission(t.Context(), scenario.Account, key); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("an admission was written: %v", err)
	}
}

func TestTicketsDisabled(t *testing.T) {
	h := newHarnessServer(t, func(o *admission.Options) { o.Tickets = nil }, func(o *server.Options) { o.TicketJWKS = nil })
	resp, body := getRaw(t, h.srv.URL+"/v1/tickets/jwks")
	if resp.StatusCode != 404 || !strings.Contains(string(body), string(api.CodeTicketsDisabled)) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	status, env := admitFixture(t, h, "megatron-llama3-8b-h100-fp8", "122.02")
	if d, _ := env["data"].(map[string]any); status != 200 || d["ticket"] != nil {
		t.Fatalf("status %d, ticket %v: want an allow without a ticket", status, d["ticket"])
	}
}
