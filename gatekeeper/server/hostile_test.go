package server_test

// The hostile-input harness (issue 6): the service started through the
// runtime, like newHarness, with a pinnable clock, configurable limits and a
// swappable policy. Every hostile request goes through hostile.do, which
// records the response so that finish can check that no token, signature or
// key bytes reached a response, the server log, the decision log or the
// metrics. The tables live in hostile_*_test.go; docs/security.md maps each
// kind of attack to the test that proves its guarantee.

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/runtime"
	"github.com/itocompute/itogate/gatekeeper/runtime/runtimetest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/trust"
)

type hostileOptions struct {
	// now pins the clock of the pipeline and of caller authentication;
	// zero means the real clock.
	now time.Time
	// maxBody and requestTimeout are limits.max_body_bytes and
	// limits.request_timeout; zero: the server's default body limit and
	// runtimetest's request timeout (patience.Deadline: a loaded CI machine
	// can take longer than the 5 s default; only the deadline tests set a
	// short one).
	maxBody        int64
	requestTimeout time.Duration
	// policy replaces the embedded bundle's decider (nil: embedded).
	policy func() admission.Decider
	// evaluations bounds concurrent evaluations (limits.*; zero: no bound).
	evaluations admission.Evaluations
}

// hostile is a harness plus the state of the hostile tables.
type hostile struct {
	*harness
	now func() time.Time
	dev keys.DevKeys
	m   scenario.Manifest
	// client bounds every request generously: a hung request fails the
	// test instead of the run.
	client *http.Client
	// callerTok and depositorTok are valid bearer tokens for an hour.
	callerTok, depositorTok string

	mu      sync.Mutex
	secrets []string // every token, signature and key used; never in any output
	bodies  []string // every response body
	seq     int
}

func newHostile(t testing.TB, o hostileOptions) *hostile {
	t.Helper()
	cfg := runtimetest.Config(t)
	cfg.Limits.MaxBodyBytes = o.maxBody
	if o.requestTimeout != 0 {
		cfg.Limits.RequestTimeout = config.Duration(o.requestTimeout)
	}
	if e := o.evaluations; e.Slots > 0 {
		cfg.Limits.MaxConcurrentEvaluations, cfg.Limits.MaxQueuedEvaluations = e.Slots, e.Queue
		cfg.Limits.MaxQueueWait = config.Duration(e.Wait)
	}
	now := time.Now
	if !o.now.IsZero() {
		pinned := o.now
		now = func() time.Time { return pinned }
	}
	logs := &syncBuffer{}
	rt := runtimetest.Open(t, cfg, runtime.Options{
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:    now,
		Admission: func(a *admission.Options) {
			if o.policy != nil {
				a.Policy = o.policy
			}
		},
	})
	harness := serveHarness(t, rt, logs)
	runner := harness.runner
	m, err := runner.LoadManifest("llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	h := &hostile{
		harness: harness,
		now:     now, dev: keys.Dev(), m: m,
		client: &http.Client{Timeout: 60 * time.Second},
	}
	h.callerTok = h.token(t, purposeCaller, nil)
	h.depositorTok = h.token(t, purposeDepositor, nil)
	h.secret(m.Signature)
	for _, k := range h.dev.All() {
		h.secret(string(k.PrivatePEM), pemBody(k.PrivatePEM), pemBody(k.PublicPEM))
	}
	return h
}

// pemBody is the base64 body of a PEM document, without its armour.
func pemBody(p []byte) string {
	var b strings.Builder
	for _, line := range strings.Split(string(p), "\n") {
		if !strings.HasPrefix(line, "-----") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// secret registers strings that must never appear in any output; a JWS is
// registered with each of its segments.
func (h *hostile) secret(ss ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range ss {
		if len(s) < 12 {
			continue
		}
		h.secrets = append(h.secrets, s)
		for _, seg := range strings.Split(s, ".") {
			if len(seg) >= 16 && seg != s {
				h.secrets = append(h.secrets, seg)
			}
		}
	}
}

func (h *hostile) allSecrets() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.secrets...)
}

// reply is one HTTP answer.
type reply struct {
	status int
	header http.Header
	env    map[string]any
	raw    string
}

func (r reply) code() api.Code { return api.Code(errCode(r.env)) }

func (r reply) message() string {
	e, _ := r.env["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}

// codes are the violation codes of a policy deny, or the error code.
func (r reply) codes() []string {
	e, _ := r.env["error"].(map[string]any)
	var out []string
	vs, _ := e["violations"].([]any)
	for _, v := range vs {
		if m, ok := v.(map[string]any); ok {
			c, _ := m["code"].(string)
			out = append(out, c)
		}
	}
	if len(out) == 0 && r.code() != "" {
		out = append(out, string(r.code()))
	}
	return out
}

func (r reply) data() map[string]any {
	d, _ := r.env["data"].(map[string]any)
	return d
}

// do sends one request and requires an envelope back.
func (h *hostile) do(t testing.TB, method, path, contentType, bearer string, body []byte) reply {
	t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return h.send(t, req)
}

func (h *hostile) send(t testing.TB, req *http.Request) reply {
	t.Helper()
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.bodies = append(h.bodies, string(raw))
	h.mu.Unlock()
	var env map[string]any
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("%s %s: %d, not an envelope: %.200s", req.Method, req.URL.Path, resp.StatusCode, raw)
	}
	if env["live_api_contacted"] != false {
		t.Fatalf("live_api_contacted is not false: %s", raw)
	}
	if ok, _ := env["ok"].(bool); ok != (resp.StatusCode < 300) {
		t.Fatalf("ok=%v with status %d", ok, resp.StatusCode)
	}
	if resp.StatusCode >= 300 && errCode(env) == "" {
		t.Fatalf("status %d without a code: %s", resp.StatusCode, raw)
	}
	return reply{status: resp.StatusCode, header: resp.Header, env: env, raw: string(raw)}
}

// want is an expected answer; code "" with status 200/201 is a success.
type want struct {
	status int
	code   api.Code
}

func (w want) String() string { return http.StatusText(w.status) + " " + string(w.code) }

// expect fails unless r is w, and checks that r holds none of the secrets.
func (h *hostile) expect(t testing.TB, r reply, w want, secrets ...string) {
	t.Helper()
	if r.status != w.status || r.code() != w.code {
		t.Fatalf("got %d %s, want %d %s: %.400s", r.status, r.code(), w.status, w.code, r.raw)
	}
	// One status per code: an expectation that disagrees with the
	// registry is itself wrong.
	if w.code != "" && api.StatusOf(w.code) != w.status {
		t.Fatalf("want %d %s, but the registry answers %s with %d", w.status, w.code, w.code, api.StatusOf(w.code))
	}
	assertNoSecretsInResponses(t, r.raw, secrets...)
}

// fixture is one admission ready to go: a valid entitlement, a deposited
// confirmation and an idempotency key nothing has used.
type fixture struct {
	ent, conf, ref, key string
}

func (h *hostile) key(prefix string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	return prefix + "-" + strconv.Itoa(h.seq)
}

func randomHex() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (h *hostile) fixture(t testing.TB) fixture {
	t.Helper()
	return h.fixtureFor(t, h.m.Raw)
}

// fixtureFor is a fixture whose confirmation binds the digest of raw.
func (h *hostile) fixtureFor(t testing.TB, raw []byte) fixture {
	t.Helper()
	ent := h.token(t, purposeEntitlement, nil)
	conf := h.token(t, purposeConfirmation, func(c map[string]any) { c["manifest_digest"] = manifest.Digest(raw) })
	return fixture{ent: ent, conf: conf, ref: h.deposit(t, conf), key: h.key("k-hostile")}
}

// deposit deposits a valid confirmation token and returns its reference.
func (h *hostile) deposit(t testing.TB, conf string) string {
	t.Helper()
	r := h.do(t, http.MethodPost, "/v1/confirmations", "application/json", h.depositorTok,
		mustMarshal(t, map[string]any{"confirmation_token": conf}))
	if r.status != http.StatusCreated {
		t.Fatalf("deposit: %d %s", r.status, r.raw)
	}
	ref, _ := r.data()["confirmation_ref"].(string)
	return ref
}

// body is the admission request of f, changed by edit (a nil value removes
// the member).
func (h *hostile) body(t testing.TB, f fixture, edit map[string]any) []byte {
	t.Helper()
	b := map[string]any{
		"action": "train.create", "booking_id": scenario.Booking, "idempotency_key": f.key,
		"manifest": base64.StdEncoding.EncodeToString(h.m.Raw), "manifest_signature": h.m.Signature,
		"entitlement_token": f.ent, "confirmation_ref": f.ref,
	}
	for k, v := range edit {
		if v == nil {
			delete(b, k)
			continue
		}
		b[k] = v
	}
	return mustMarshal(t, b)
}

func (h *hostile) admit(t testing.TB, body []byte) reply {
	t.Helper()
	return h.do(t, http.MethodPost, "/v1/admissions", "application/json", h.callerTok, body)
}

// untouched fails unless the confirmation ref is still available and no
// admission is stored under key: the deny wrote nothing.
func (h *hostile) untouched(t testing.TB, ref, key string) {
	t.Helper()
	ctx := context.Background()
	if ref != "" {
		c, err := h.store.Confirmation(ctx, ref)
		if err != nil || c.State != ledger.ConfirmationAvailable || c.ConsumedBy != "" {
			t.Fatalf("confirmation %s: state %q consumed by %q, %v; want available", ref, c.State, c.ConsumedBy, err)
		}
	}
	if key != "" {
		if a, err := h.store.Admission(ctx, scenario.Account, key); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("admission stored under %q: %+v, %v", key, a, err)
		}
	}
}

// allowed admits f unchanged and requires the allow: the fixture was usable
// all along, so every deny before it was the hostile input's doing.
func (h *hostile) allowed(t testing.TB, f fixture) {
	t.Helper()
	r := h.admit(t, h.body(t, f, nil))
	if r.status != http.StatusOK || r.data()["decision"] != "allow" {
		t.Fatalf("the untouched fixture is not allowed: %d %s", r.status, r.raw)
	}
}

// logCount counts s in the server log.
func (h *hostile) logCount(s string) int { return strings.Count(h.logs.String(), s) }

// finish flushes the decision log and checks every output for every
// registered secret: responses, server log, decision log, metrics.
func (h *hostile) finish(t *testing.T) {
	t.Helper()
	metrics := h.metricsText(t)
	h.dl.Close()
	secrets := h.allSecrets()
	h.mu.Lock()
	bodies := strings.Join(h.bodies, "\n")
	h.mu.Unlock()
	t.Run("no secret in responses", func(t *testing.T) { assertNoSecretsInResponses(t, bodies, secrets...) })
	for name, out := range map[string]string{
		"server log": h.logs.String(), "decision log": h.dlog.String(), "metrics": metrics,
	} {
		t.Run("no secret in "+name, func(t *testing.T) { assertNoSecrets(t, out, secrets...) })
	}
}

func kib(n int) string { return strconv.Itoa(n>>10) + " KiB" }

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// --- tokens -----------------------------------------------------------------

// purpose names the four token purposes as the tables use them.
type purpose string

const (
	purposeEntitlement  purpose = "entitlement"
	purposeConfirmation purpose = "confirmation"
	purposeCaller       purpose = "caller"
	purposeDepositor    purpose = "depositor"
)

// devKey is the development key of purpose p.
func (h *hostile) devKey(p purpose) keys.Key {
	switch p {
	case purposeEntitlement:
		return h.dev.Entitlement
	case purposeConfirmation:
		return h.dev.Confirmation
	case purposeCaller:
		return h.dev.Caller
	default:
		return h.dev.Depositor
	}
}

func (h *hostile) header(p purpose) map[string]any {
	k := h.devKey(p)
	hdr := map[string]any{"alg": k.Algorithm, "kid": k.KeyID}
	switch p {
	case purposeEntitlement:
		hdr["typ"] = config.TypeEntitlement
	case purposeConfirmation:
		hdr["typ"] = config.TypeConfirmation
	}
	return hdr
}

// claims are valid claims of purpose p at the harness clock, with a fresh jti.
func (h *hostile) claims(p purpose) map[string]any {
	now := h.now().Unix()
	jti := "jti_" + randomHex()
	switch p {
	case purposeEntitlement:
		c := scenario.EntitlementClaims(h.m.Doc, h.now())
		c["jti"] = jti
		return c
	case purposeConfirmation:
		return map[string]any{
			"iss": trust.DevConfirmationIssuer, "aud": trust.DevAudience, "sub": scenario.Account,
			"iat": now, "exp": now + 600, "jti": jti, "act": "train.create", "booking_id": scenario.Booking,
			"manifest_digest": manifest.Digest(h.m.Raw), "cost_usd": "2000.00",
		}
	case purposeCaller:
		return map[string]any{
			"iss": trust.DevCallerIssuer, "aud": trust.DevAudience, "sub": "svc-hostile", "account": scenario.Account,
			"iat": now, "exp": now + 3600, "jti": jti,
		}
	default:
		return map[string]any{
			"iss": trust.DevDepositorIssuer, "aud": trust.DevDepositAudience, "sub": "confirmation-desk",
			"iat": now, "exp": now + 3600, "jti": jti,
		}
	}
}

// token is a valid token of purpose p, its claims changed by edit.
func (h *hostile) token(t testing.TB, p purpose, edit func(map[string]any)) string {
	t.Helper()
	c := h.claims(p)
	if edit != nil {
		edit(c)
	}
	tok := compactJWS(mustMarshal(t, h.header(p)), mustMarshal(t, c), es256(h.devKey(p).Private))
	h.secret(tok)
	return tok
}

// compactJWS is base64url(header).base64url(payload).base64url(sign(input));
// a nil sign leaves the signature empty.
func compactJWS(hdr, payload []byte, sign func([]byte) []byte) string {
	input := base64.RawURLEncoding.EncodeToString(hdr) + "." + base64.RawURLEncoding.EncodeToString(payload)
	var sig []byte
	if sign != nil {
		sig = sign([]byte(input))
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// es256 signs as JWS ES256 (raw r||s, 32 bytes each).
func es256(priv crypto.Signer) func([]byte) []byte {
	return func(input []byte) []byte {
		k := priv.(*ecdsa.PrivateKey)
		sum := sha256.Sum256(input)
		r, s, err := ecdsa.Sign(rand.Reader, k, sum[:])
		if err != nil {
			panic(err)
		}
		out := make([]byte, 64)
		r.FillBytes(out[:32])
		s.FillBytes(out[32:])
		return out
	}
}
