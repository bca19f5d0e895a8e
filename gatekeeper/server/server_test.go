package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/runtime"
	"github.com/itocompute/itogate/gatekeeper/runtime/runtimetest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/server"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/internal/syncbuf"
)

// syncBuffer collects output written concurrently.
type syncBuffer = syncbuf.Buffer

type harness struct {
	rt     *runtime.Runtime
	dlog   decisionFile
	dl     *decisionlog.Logger
	srv    *httptest.Server
	store  ledger.Store
	logs   *syncBuffer
	runner *scenario.Runner
	engine *policy.Engine
}

// decisionFile is the runtime's decision log file (decision_log's default,
// <data_dir>/decisions.jsonl). Close the decision log before reading it:
// lines are written by a goroutine of their own.
type decisionFile string

func (f decisionFile) String() string {
	b, err := os.ReadFile(string(f))
	if err != nil {
		panic(err) // the runtime created it at Open
	}
	return string(b)
}

// metricsText scrapes /metrics.
func (h *harness) metricsText(t testing.TB) string {
	t.Helper()
	c := &http.Client{Timeout: 60 * time.Second}
	resp, err := c.Get(h.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// newHarness starts the service through the runtime, as `itogate serve`
// in development mode (runtimetest: the embedded bundle, a bbolt ledger and
// the decision log in a temporary directory, the development trust), and
// serves its router, every response checked against the code registry.
// mutate, when set, has the last word on the admission's options.
func newHarness(t *testing.T, mutate func(*admission.Options)) *harness {
	t.Helper()
	return newHarnessServer(t, mutate, nil)
}

// newHarnessServer is newHarness with a hook on the server's options too.
func newHarnessServer(t *testing.T, mutate func(*admission.Options), mutateServer func(*server.Options)) *harness {
	t.Helper()
	logs := &syncBuffer{}
	rt := runtimetest.Open(t, runtimetest.Config(t), runtime.Options{
		Logger: slog.New(slog.NewJSONHandler(logs, nil)), Admission: mutate, Server: mutateServer,
	})
	return serveHarness(t, rt, logs)
}

// serveHarness serves rt's router, wrapped by registryChecked, and points a
// scenario runner at it.
func serveHarness(t testing.TB, rt *runtime.Runtime, logs *syncBuffer) *harness {
	t.Helper()
	srv := runtimetest.Serve(t, rt, registryChecked(t, rt.Handler()))
	r, err := scenario.New(srv.URL, fixtures.Manifests())
	if err != nil {
		t.Fatal(err)
	}
	return &harness{rt: rt, srv: srv, store: rt.Ledger(), logs: logs, runner: r, engine: rt.Bundles().Engine(),
		dlog: decisionFile(rt.Config().DecisionLogPath()), dl: rt.DecisionLog()}
}

// TestDemoCases runs the demo's cases — every fixture manifest with its
// expected decision plus the replay, conflict, tamper and lifecycle flow —
// through the real HTTP API.
func TestDemoCases(t *testing.T) {
	h := newHarness(t, nil)
	cases, err := scenario.LoadCases(fixtures.Cases(), "policy-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 6 {
		t.Fatalf("expected at least the six reference fixtures, got %d", len(cases))
	}
	for _, res := range h.runner.Run(context.Background(), cases) {
		if !res.Pass {
			t.Errorf("%s: expected %s, got %s", res.Name, res.Expected, res.Got)
		}
	}
	assertNoSecrets(t, h.logs.String())

	// One decision-log line per admission, none holding a secret, allows
	// with their input for replay.
	h.dl.Close()
	events, err := decisionlog.Read(strings.NewReader(h.dlog.String()))
	if err != nil {
		t.Fatal(err)
	}
	assertNoSecrets(t, h.dlog.String())
	allows := 0
	for _, ev := range events {
		if ev.Result == "allow" && ev.PolicyResult == "allow" {
			allows++
			if ev.Input == nil || ev.BundleRevision == "" || ev.JTIs["confirmation"] == "" {
				t.Errorf("allow event without input, revision or jti: %+v", ev)
			}
			if _, masked := ev.Input["confirmation"].(map[string]any)["ref"]; masked {
				t.Error("the confirmation ref was not masked")
			}
		}
	}
	if allows < 5 {
		t.Errorf("only %d logged allows", allows)
	}

	body := h.metricsText(t)
	for _, want := range []string{
		`itogate_admission_decisions_total{code="CONFIRMATION_REPLAYED",decision="deny"} 1`,
		`itogate_admission_decisions_total{code="IDEMPOTENCY_KEY_CONFLICT",decision="deny"} 1`,
		`itogate_verification_failures_total{kind="signature",purpose="manifest"} 1`,
		`itogate_http_requests_total{code="401",method="GET",route="/v1/admissions/{idempotency_key}"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func post(t *testing.T, h *harness, path, contentType, bearer string, body []byte) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var env map[string]any
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("not an envelope: %s", raw)
	}
	if _, ok := env["live_api_contacted"]; !ok {
		t.Fatalf("envelope without live_api_contacted: %s", raw)
	}
	return resp.StatusCode, env
}

func errCode(env map[string]any) string {
	e, _ := env["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// TestMalformedRequests: each bad request gets its exact status and code and
// consumes nothing.
func TestMalformedRequests(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	m, err := h.runner.LoadManifest("llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	ent, err := h.runner.EntitlementFor(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := h.runner.Confirm(ctx, "train.create", manifest.Digest(m.Raw), "2000.00", "")
	if err != nil {
		t.Fatal(err)
	}
	caller := callerToken(t, h)
	good := map[string]any{
		"action": "train.create", "booking_id": scenario.Booking, "idempotency_key": "k-malformed",
		"manifest": base64.StdEncoding.EncodeToString(m.Raw), "manifest_signature": m.Signature,
		"entitlement_token": ent, "confirmation_ref": ref,
	}
	body := func(edit func(map[string]any)) []byte {
		c := map[string]any{}
		for k, v := range good {
			c[k] = v
		}
		if edit != nil {
			edit(c)
		}
		b, _ := json.Marshal(c)
		return b
	}
	goodJSON := string(body(nil))
	cases := []struct {
		name, ctype, bearer string
		body                []byte
		status              int
		code                string
	}{
		{"no bearer", "application/json", "", body(nil), 401, "CALLER_UNAUTHENTICATED"},
		{"entitlement token as bearer", "application/json", ent, body(nil), 401, "CALLER_UNAUTHENTICATED"},
		{"wrong content type", "text/plain", caller, body(nil), 415, "REQUEST_CONTENT_TYPE_UNSUPPORTED"},
		{"duplicate key", "application/json", caller, []byte(strings.Replace(goodJSON, `{"action":"train.create"`, `{"action":"train.create","action":"train.cancel"`, 1)), 400, "REQUEST_INVALID"},
		{"case-variant key", "application/json", caller, []byte(strings.Replace(goodJSON, `{"action":"train.create"`, `{"action":"train.create","Action":"train.cancel"`, 1)), 400, "REQUEST_INVALID"},
		{"unknown field", "application/json", caller, body(func(c map[string]any) { c["allow"] = true }), 400, "REQUEST_INVALID"},
		{"wrong type", "application/json", caller, body(func(c map[string]any) { c["action"] = 1 }), 400, "REQUEST_INVALID"},
		{"unknown action", "application/json", caller, body(func(c map[string]any) { c["action"] = "train.delete" }), 400, "REQUEST_INVALID"},
		{"bad ref", "application/json", caller, body(func(c map[string]any) { c["confirmation_ref"] = "cfr_xyz" }), 400, "REQUEST_INVALID"},
		{"manifest not base64", "application/json", caller, body(func(c map[string]any) { c["manifest"] = "%%%" }), 400, "MANIFEST_ENCODING_INVALID"},
		{"unknown ref", "application/json", caller, body(func(c map[string]any) { c["confirmation_ref"] = "cfr_" + strings.Repeat("0", 32) }), 403, "CONFIRMATION_NOT_FOUND"},
		{"bad signature", "application/json", caller, body(func(c map[string]any) { c["manifest_signature"] = base64.StdEncoding.EncodeToString(make([]byte, 70)) }), 403, "MANIFEST_SIGNATURE_INVALID"},
		{"confirmation token as entitlement", "application/json", caller, body(func(c map[string]any) { c["entitlement_token"] = caller }), 403, "ENTITLEMENT_INVALID"},
		{"body over limit", "application/json", caller, bytes.Repeat([]byte(" "), 3<<20), 413, "REQUEST_TOO_LARGE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, env := post(t, h, "/v1/admissions", tc.ctype, tc.bearer, tc.body)
			if status != tc.status || errCode(env) != tc.code {
				t.Fatalf("got %d %s, want %d %s (%v)", status, errCode(env), tc.status, tc.code, env)
			}
			if env["ok"] != false {
				t.Fatal("ok must be false")
			}
		})
	}
	// Nothing above consumed the confirmation or reserved the key.
	c, err := h.store.Confirmation(ctx, ref)
	if err != nil || c.State != ledger.ConfirmationAvailable {
		t.Fatalf("confirmation state %q, %v; want available", c.State, err)
	}
	if _, err := h.store.Admission(ctx, scenario.Account, "k-malformed"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("admission written: %v", err)
	}
	// And the good request still passes afterwards.
	status, env := post(t, h, "/v1/admissions", "application/json", caller, body(nil))
	if status != 200 || env["ok"] != true {
		t.Fatalf("good request after bad ones: %d %v", status, env)
	}
	assertNoSecrets(t, h.logs.String())
}

// TestDenyWritesNothing: a policy deny leaves the confirmation usable.
func TestDenyWritesNothing(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	m, _ := h.runner.LoadManifest("llama3-8b")
	ref, err := h.runner.Confirm(ctx, "train.create", manifest.Digest(m.Raw), "2000.00", "")
	if err != nil {
		t.Fatal(err)
	}
	stale, _ := h.runner.EntitlementFor(m, func(c map[string]any) { c["iat"] = time.Now().Unix() - 600 })
	req := api.AdmissionRequest{Action: "train.create", BookingID: scenario.Booking, IdempotencyKey: "k-deny",
		Manifest: m.Raw, ManifestSignature: m.Signature, EntitlementToken: stale, ConfirmationRef: ref}
	a, err := h.runner.Admit(ctx, req)
	if err != nil || a.Status != 403 || a.Error.Code != "ENTITLEMENT_STALE" {
		t.Fatalf("got %+v %v", a, err)
	}
	if c, _ := h.store.Confirmation(ctx, ref); c.State != ledger.ConfirmationAvailable {
		t.Fatalf("deny consumed the confirmation: %q", c.State)
	}
	if _, err := h.store.Admission(ctx, scenario.Account, "k-deny"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("deny reserved the key: %v", err)
	}
	// The same confirmation and key then pass with a fresh entitlement.
	req.EntitlementToken, _ = h.runner.EntitlementFor(m, nil)
	if a, err := h.runner.Admit(ctx, req); err != nil || a.Status != 200 {
		t.Fatalf("after deny: %+v %v", a, err)
	}
}

// TestConcurrentAdmissionsOneConfirmation: many keys race on one
// confirmation; exactly one allow, the rest CONFIRMATION_REPLAYED.
func TestConcurrentAdmissionsOneConfirmation(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	m, _ := h.runner.LoadManifest("llama3-8b")
	ref, err := h.runner.Confirm(ctx, "train.create", manifest.Digest(m.Raw), "2000.00", "")
	if err != nil {
		t.Fatal(err)
	}
	ent, _ := h.runner.EntitlementFor(m, nil)
	const n = 40
	var wg sync.WaitGroup
	results := make([]scenario.Answer, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i], errs[i] = h.runner.Admit(ctx, api.AdmissionRequest{Action: "train.create",
				BookingID: scenario.Booking, IdempotencyKey: "race-" + string(rune('a'+i%26)) + string(rune('a'+i/26)),
				Manifest: m.Raw, ManifestSignature: m.Signature, EntitlementToken: ent, ConfirmationRef: ref})
		}(i)
	}
	wg.Wait()
	allows, replays := 0, 0
	for i, a := range results {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		switch {
		case a.Status == 200:
			allows++
		case a.Status == 403 && a.Error.Code == "CONFIRMATION_REPLAYED":
			replays++
		default:
			t.Errorf("unexpected answer %d %+v", a.Status, a.Error)
		}
	}
	if allows != 1 || replays != n-1 {
		t.Fatalf("allows=%d replays=%d, want 1 and %d", allows, replays, n-1)
	}
}

// TestStoreFaultsDeny: a closed ledger and a missing bundle deny with 503.
func TestStoreFaultsDeny(t *testing.T) {
	ctx := context.Background()
	t.Run("ledger closed", func(t *testing.T) {
		h := newHarness(t, nil)
		m, _ := h.runner.LoadManifest("llama3-8b")
		ref, err := h.runner.Confirm(ctx, "train.create", manifest.Digest(m.Raw), "2000.00", "")
		if err != nil {
			t.Fatal(err)
		}
		ent, _ := h.runner.EntitlementFor(m, nil)
		h.store.Close()
		a, err := h.runner.Admit(ctx, api.AdmissionRequest{Action: "train.create", BookingID: scenario.Booking,
			IdempotencyKey: "k-fault", Manifest: m.Raw, ManifestSignature: m.Signature, EntitlementToken: ent, ConfirmationRef: ref})
		if err != nil || a.Status != 503 || a.Error.Code != "LEDGER_UNAVAILABLE" {
			t.Fatalf("got %+v %v", a, err)
		}
		resp, err := http.Get(h.srv.URL + "/readyz")
		if err != nil || resp.StatusCode != 503 {
			t.Fatalf("readyz with a closed ledger: %v %v", resp.StatusCode, err)
		}
		// The first read is whether the caller's key was revoked.
		if body := h.metricsText(t); !strings.Contains(body, `itogate_ledger_errors_total{op="revocation lookup"} 1`) {
			t.Fatalf("ledger error not counted:\n%s", body)
		}
	})
	t.Run("restore hold", func(t *testing.T) {
		// A restored ledger's hold refuses the commit and the deposit before
		// writing: 503 naming the hold's end, never "the outcome is
		// unknown", and nothing stored under the key.
		until := time.Date(2099, 1, 2, 3, 4, 5, 0, time.UTC)
		var held heldStore
		h := newHarness(t, func(o *admission.Options) { held.Store = o.Ledger; held.until = until; o.Ledger = &held })
		m, _ := h.runner.LoadManifest("llama3-8b")
		ref, err := h.runner.Confirm(ctx, "train.create", manifest.Digest(m.Raw), "2000.00", "")
		if err != nil {
			t.Fatal(err)
		}
		ent, _ := h.runner.EntitlementFor(m, nil)
		held.on.Store(true)
		want := "the ledger was restored from a backup: deposits and admissions are held until 2099-01-02T03:04:05Z; denied, nothing was written"
		a, err := h.runner.Admit(ctx, api.AdmissionRequest{Action: "train.create", BookingID: scenario.Booking,
			IdempotencyKey: "k-held", Manifest: m.Raw, ManifestSignature: m.Signature, EntitlementToken: ent, ConfirmationRef: ref})
		if err != nil || a.Status != 503 || a.Error.Code != "LEDGER_UNAVAILABLE" || a.Error.Message != want {
			t.Fatalf("commit during the hold: %+v %v; want 503 LEDGER_UNAVAILABLE %q", a, err, want)
		}
		if _, err := h.store.Admission(ctx, scenario.Account, "k-held"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("admission stored during the hold: %v", err)
		}
		_, err = h.runner.Confirm(ctx, "train.create", manifest.Digest(m.Raw), "2000.00", "")
		if err == nil || !strings.Contains(err.Error(), "LEDGER_UNAVAILABLE") || !strings.Contains(err.Error(), "held until 2099-01-02T03:04:05Z") {
			t.Fatalf("deposit during the hold: %v", err)
		}
	})
	t.Run("no bundle", func(t *testing.T) {
		h := newHarness(t, func(o *admission.Options) { o.Policy = func() admission.Decider { return nil } })
		m, _ := h.runner.LoadManifest("llama3-8b")
		a, _, err := h.runner.Create(ctx, m, "k-nobundle")
		if err != nil || a.Status != 503 || a.Error.Code != "POLICY_NOT_READY" {
			t.Fatalf("got %+v %v", a, err)
		}
	})
}

// heldStore refuses deposits and commits as a restored ledger does during
// its hold (ledger.Held) once on is set; everything else goes to Store.
type heldStore struct {
	ledger.Store
	until time.Time
	on    atomic.Bool
}

func (s *heldStore) hold(op string) error {
	if !s.on.Load() {
		return nil
	}
	return fmt.Errorf("ledger: test: %s: %w: %w", op, ledger.ErrUnavailable, ledger.Held(s.until, time.Now()))
}

func (s *heldStore) DepositConfirmation(ctx context.Context, c ledger.Confirmation) error {
	if err := s.hold("deposit"); err != nil {
		return err
	}
	return s.Store.DepositConfirmation(ctx, c)
}

func (s *heldStore) Commit(ctx context.Context, a ledger.Admission) (ledger.Admission, bool, error) {
	if err := s.hold("commit"); err != nil {
		return ledger.Admission{}, false, err
	}
	return s.Store.Commit(ctx, a)
}

func callerToken(t *testing.T, _ *harness) string {
	t.Helper()
	// The runner's client carries it; mint an equal one for raw requests.
	tok, err := scenario.CallerToken()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// assertNoSecrets fails when an output (a log, a response) holds anything
// shaped like a token or a signature — JWS compact serializations start with
// base64url("{\""), DER ECDSA signatures with "MEUCI"/"MEQCI" in base64 — or
// any of the exact secrets used (tokens, their segments, signatures, keys).
func assertNoSecrets(t testing.TB, logs string, secrets ...string) {
	t.Helper()
	for _, marker := range []string{"eyJ", "MEUCI", "MEQCI", "PRIVATE KEY"} {
		if strings.Contains(logs, marker) {
			t.Fatalf("logs contain %q: %.2000s", marker, logs)
		}
	}
	if s := findSecret(logs, secrets); s != "" {
		t.Fatalf("an output holds a secret used in the test (%.24s…): %.2000s", s, logs)
	}
}

// ticketField is the admission ticket of an allowed train.create answer
// (data.ticket, docs/tickets.md): the one JWS a response holds by design,
// signed by itogate over claims of its own.
var ticketField = regexp.MustCompile(`"ticket":"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+"`)

// assertNoSecretsInResponses is assertNoSecrets for response bodies: the
// admission ticket is left out of the check for token shapes, never out of
// the check for the secrets used.
func assertNoSecretsInResponses(t testing.TB, bodies string, secrets ...string) {
	t.Helper()
	assertNoSecrets(t, ticketField.ReplaceAllString(bodies, `"ticket":"(ticket)"`))
	if s := findSecret(bodies, secrets); s != "" {
		t.Fatalf("a response holds a secret used in the test (%.24s…): %.2000s", s, bodies)
	}
}

// findSecret returns the first secret found in out. Secrets of 16 bytes or
// more are looked up by their first 16 bytes at every offset of out, so
// thousands of secrets cost one pass.
func findSecret(out string, secrets []string) string {
	const w = 16
	byPrefix := map[string][]string{}
	for _, s := range secrets {
		switch {
		case len(s) < 8:
		case len(s) < w:
			if strings.Contains(out, s) {
				return s
			}
		default:
			byPrefix[s[:w]] = append(byPrefix[s[:w]], s)
		}
	}
	if len(byPrefix) == 0 {
		return ""
	}
	for i := 0; i+w <= len(out); i++ {
		for _, s := range byPrefix[out[i:i+w]] {
			if strings.HasPrefix(out[i:], s) {
				return s
			}
		}
	}
	return ""
}

// TestCredentialNeverEchoed: a manifest holding a credential is denied with
// MANIFEST_CREDENTIAL_DETECTED, and the secret appears in no response, log
// line or decision-log event.
func TestCredentialNeverEchoed(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	base, err := h.runner.LoadManifest("llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	for name, secret := range map[string]string{
		"url userinfo":   "https://trainer:hunter2-Sup3rSecret@data.example.com/shard",
		"aws key in uri": "s3://bucket/AKIAIOSFODNN7EXAMPLE/shard",
		"presigned url":  "https://b.s3.amazonaws.com/x?X-Amz-Signature=deadbeefcafe0123456789",
	} {
		t.Run(name, func(t *testing.T) {
			raw := bytes.Replace(base.Raw, []byte("s3://ito-datasets/fineweb-edu/sample-350bt/"), []byte(secret), 1)
			if bytes.Equal(raw, base.Raw) {
				t.Fatal("fixture changed: the dataset uri to replace is gone")
			}
			m, err := h.runner.SignManifest(raw)
			if err != nil {
				t.Fatal(err)
			}
			a, req, err := h.runner.Create(ctx, m, "k-cred-"+strings.ReplaceAll(name, " ", "-"))
			if err != nil {
				t.Fatal(err)
			}
			if a.Status != 403 || !contains(a.Codes(), "MANIFEST_CREDENTIAL_DETECTED") {
				t.Fatalf("got %d %v", a.Status, a.Codes())
			}
			status, env := h.runner.Raw(ctx, req)
			if status != 403 || strings.Contains(env, secret) || strings.Contains(env, "hunter2") {
				t.Fatalf("response echoes the secret: %s", env)
			}
		})
	}
	h.dl.Close()
	for _, out := range []string{h.logs.String(), h.dlog.String()} {
		for _, s := range []string{"hunter2", "AKIAIOSFODNN7EXAMPLE", "deadbeefcafe0123456789"} {
			if strings.Contains(out, s) {
				t.Fatalf("a log holds %q", s)
			}
		}
	}
	// Each deny is logged, with the manifest masked by the policy's mask
	// (evaluated with the decision), not dropped by the Go guard.
	events, err := decisionlog.Read(strings.NewReader(h.dlog.String()))
	if err != nil {
		t.Fatal(err)
	}
	logged := 0
	for _, ev := range events {
		if !strings.HasPrefix(ev.IdempotencyKey, "k-cred-") {
			continue
		}
		logged++
		if _, kept := ev.Input["manifest"]; kept || strings.Join(ev.Masked, ",") != "/confirmation/ref,/manifest" {
			t.Errorf("%s: masked %v, manifest kept %v", ev.IdempotencyKey, ev.Masked, kept)
		}
	}
	if logged != 6 { // three manifests, each sent twice (Create, then Raw)
		t.Fatalf("%d credential denies in the decision log, want 6", logged)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestIdenticalRetriesRacing: concurrent copies of one request (same key,
// same confirmation) all get the same allow — the losers of the race see the
// confirmation consumed by their own request and answer the stored allow.
func TestIdenticalRetriesRacing(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	m, _ := h.runner.LoadManifest("llama3-8b")
	ref, err := h.runner.Confirm(ctx, "train.create", manifest.Digest(m.Raw), "2000.00", "")
	if err != nil {
		t.Fatal(err)
	}
	ent, _ := h.runner.EntitlementFor(m, nil)
	req := api.AdmissionRequest{Action: "train.create", BookingID: scenario.Booking, IdempotencyKey: "same-key",
		Manifest: m.Raw, ManifestSignature: m.Signature, EntitlementToken: ent, ConfirmationRef: ref}
	const n = 20
	answers := make([]scenario.Answer, n)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			a, err := h.runner.Admit(ctx, req)
			if err != nil {
				t.Error(err)
			}
			answers[i] = a
		}(i)
	}
	wg.Wait()
	runs := map[string]bool{}
	for _, a := range answers {
		if a.Status != 200 {
			t.Fatalf("a copy of the request got %d %v", a.Status, a.Codes())
		}
		runs[a.Data.RunID] = true
	}
	if len(runs) != 1 {
		t.Fatalf("%d different runs admitted", len(runs))
	}
}

// TestCallerWithoutAccount: a verified caller token without the account
// claim is refused; the subject never stands in for the account.
func TestCallerWithoutAccount(t *testing.T) {
	h := newHarness(t, nil)
	tok, err := scenario.MintCaller(map[string]any{"account": nil})
	if err != nil {
		t.Fatal(err)
	}
	status, env := post(t, h, "/v1/admissions", "application/json", tok, []byte(`{}`))
	if status != 401 || errCode(env) != "CALLER_UNAUTHENTICATED" {
		t.Fatalf("got %d %v", status, env)
	}
}

// TestShadowBundleNeverEnforced: a candidate bundle that denies everything
// is evaluated beside the enforced one; the enforced allow stands and the
// disagreement is counted.
func TestShadowBundleNeverEnforced(t *testing.T) {
	denyAll, err := policy.New(context.Background(), policy.Options{Deadline: patience.Deadline, SkipRequiredRules: true, Bundle: fstest.MapFS{
		"ito/admission/admission.rego": {Data: []byte(`package ito.admission

decision := {"allow": false, "violations": [{"code": "SHADOW_DENY", "gate": "g", "message": "m"}]}
`)}}})
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan admission.ShadowResult, 4)
	h := newHarness(t, func(o *admission.Options) {
		o.Shadow = func() admission.Decider { return denyAll }
		o.OnShadow = func(r admission.ShadowResult) { results <- r }
	})
	m, _ := h.runner.LoadManifest("llama3-8b")
	a, _, err := h.runner.Create(context.Background(), m, "k-shadow")
	if err != nil || a.Status != 200 {
		t.Fatalf("enforced decision changed by the shadow: %d %v %v", a.Status, a.Codes(), err)
	}
	select {
	case r := <-results:
		if r.Kind != "allow_to_deny" || r.Agree || r.DecisionID != a.Data.DecisionID || len(r.ShadowCodes) != 1 {
			t.Fatalf("shadow result %+v", r)
		}
	case <-time.After(patience.Wait):
		t.Fatal("no shadow result")
	}
}
