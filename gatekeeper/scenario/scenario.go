// Package scenario drives admission cases through a running itogate over its
// real HTTP API, with tokens minted from the development keys. `itogate demo`
// prints its table; the end-to-end tests run the same cases, so the demo a
// newcomer sees is the behaviour CI checks.
package scenario

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/client"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// Account and booking used by every case.
const (
	Account = "acct_demo"
	Booking = "bk_demo_01"
)

// Result is one case: what was expected and what the server answered.
type Result struct {
	Name     string
	Expected string // "200 allow", "403 CODE+CODE"
	Got      string
	Pass     bool
	Detail   string
}

// Runner holds the connection and the development signing keys.
type Runner struct {
	base      string
	manifests fs.FS
	now       func() time.Time
	keys      keys.DevKeys
	caller    *client.Client
	depositor *client.Client
	evals     *client.Client // no bearer: a report is its own credential
	seq       int
}

// CallerToken mints a development caller token for the demo account.
func CallerToken() (string, error) {
	r := &Runner{now: time.Now, keys: keys.Dev()}
	return r.callerToken()
}

// MintCaller mints a development caller token whose claims are the demo
// caller's changed by override (a nil value removes the claim).
func MintCaller(override map[string]any) (string, error) {
	r := &Runner{now: time.Now, keys: keys.Dev()}
	claims := map[string]any{
		"iss": trust.DevCallerIssuer, "aud": trust.DevAudience, "sub": "svc-demo-trainer", "account": Account,
	}
	for k, v := range override {
		if v == nil {
			delete(claims, k)
			continue
		}
		claims[k] = v
	}
	return r.mint(r.keys.Caller, "", claims, time.Hour)
}

// SetClock makes now the runner's clock: the iat, exp and time claims of
// every token it mints from then on. A test that moves the service's clock
// moves the runner's with it, so the tokens stay as fresh as in real time
// whatever the machine's speed. Not safe while the runner is in use.
func (r *Runner) SetClock(now func() time.Time) { r.now = now }

// CallerToken mints the demo caller's bearer token (account Account).
func (r *Runner) CallerToken() (string, error) { return r.callerToken() }

func (r *Runner) callerToken() (string, error) {
	return r.mint(r.keys.Caller, "", map[string]any{
		"iss": trust.DevCallerIssuer, "aud": trust.DevAudience, "sub": "svc-demo-trainer", "account": Account,
	}, time.Hour)
}

// New returns a Runner against baseURL, reading fixture manifests from
// manifests (the fixtures/manifests directory).
func New(baseURL string, manifests fs.FS) (*Runner, error) {
	r := &Runner{base: baseURL, manifests: manifests, now: time.Now, keys: keys.Dev()}
	callerTok, err := r.callerToken()
	if err != nil {
		return nil, err
	}
	depTok, err := r.mint(r.keys.Depositor, "", map[string]any{
		"iss": trust.DevDepositorIssuer, "aud": trust.DevDepositAudience, "sub": "confirmation-desk",
	}, time.Hour)
	if err != nil {
		return nil, err
	}
	// The scenario drives the demo and the tests, often on a loaded shared
	// machine: the server bounds its own work (its request timeout), so the
	// client waits for the answer instead of turning a slow one into a
	// failure of its own.
	const wait = 5 * time.Minute
	if r.caller, err = client.New(client.Options{BaseURL: baseURL, Bearer: callerTok, Attempts: 1, Timeout: wait}); err != nil {
		return nil, err
	}
	if r.depositor, err = client.New(client.Options{BaseURL: baseURL, Bearer: depTok, Attempts: 1, Timeout: wait}); err != nil {
		return nil, err
	}
	if r.evals, err = client.New(client.Options{BaseURL: baseURL, Attempts: 1, Timeout: wait}); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Runner) mint(k keys.Key, typ string, claims map[string]any, ttl time.Duration) (string, error) {
	now := r.now().Unix()
	c := map[string]any{"iat": now, "exp": now + int64(ttl/time.Second), "jti": randomID("jti_")}
	for key, v := range claims {
		c[key] = v
	}
	if iat, ok := claims["iat"].(int64); ok && claims["exp"] == nil {
		c["exp"] = iat + int64(ttl/time.Second)
	}
	tok, err := token.Mint(k.Private, k.KeyID, k.Algorithm, typ, c)
	return string(tok), err
}

// Manifest is a fixture manifest with its signature.
type Manifest struct {
	Name      string
	Raw       []byte
	Signature string
	Doc       map[string]any
}

// LoadManifest reads fixtures/manifests/<name>.json and signs it with the
// development ECDSA manifest key.
func (r *Runner) LoadManifest(name string) (Manifest, error) {
	raw, err := fs.ReadFile(r.manifests, name+".json")
	if err != nil {
		return Manifest{}, err
	}
	sig, err := token.SignManifest(r.keys.ManifestECDSA.Private, raw)
	if err != nil {
		return Manifest{}, err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return Manifest{}, fmt.Errorf("%s: %w", name, err)
	}
	return Manifest{Name: name, Raw: raw, Signature: sig, Doc: doc}, nil
}

// SignManifest signs raw (any bytes) with the development ECDSA manifest key.
func (r *Runner) SignManifest(raw []byte) (Manifest, error) {
	sig, err := token.SignManifest(r.keys.ManifestECDSA.Private, raw)
	if err != nil {
		return Manifest{}, err
	}
	var doc map[string]any
	_ = json.Unmarshal(raw, &doc) // a broken manifest is the server's to refuse
	return Manifest{Name: "custom", Raw: raw, Signature: sig, Doc: doc}, nil
}

// Raw posts an admission and returns the status and the envelope text.
func (r *Runner) Raw(ctx context.Context, req api.AdmissionRequest) (int, string) {
	resp, err := r.caller.Admit(ctx, req)
	if err != nil {
		return 0, err.Error()
	}
	return resp.Status, string(resp.Body)
}

// BookingScale is how many of the manifest's nodes the demo booking books:
// every demo run shares one booking (Booking), so the booking is large
// enough that the demo's runs never fill it. Capacity cases book exactly
// what they race for (see TestBookingCapacity*).
const BookingScale = 1000

// EntitlementClaims are the claims of an entitlement for the manifest doc's
// gpu type and gpus per node with BookingScale times its nodes, priced at
// 2.49 USD per GPU-hour, over a 30-day term that started an hour before
// now, issued at now for five minutes.
func EntitlementClaims(doc map[string]any, now time.Time) map[string]any {
	return bookingClaims(doc, now, BookingScale)
}

// ExactEntitlementClaims are EntitlementClaims for a booking of exactly the
// manifest's topology: what `itogate eval` assumes, so its booked_gpus is
// the run's own world size.
func ExactEntitlementClaims(doc map[string]any, now time.Time) map[string]any {
	return bookingClaims(doc, now, 1)
}

func bookingClaims(doc map[string]any, now time.Time, scale int64) map[string]any {
	hw, _ := doc["hardware"].(map[string]any)
	n := now.Unix()
	nodes := hw["nodes"]
	switch v := nodes.(type) {
	case float64:
		nodes = v * float64(scale)
	case json.Number:
		if i, err := v.Int64(); err == nil {
			nodes = i * scale
		}
	case int64:
		nodes = v * scale
	case int:
		nodes = int64(v) * scale
	}
	return map[string]any{
		"iss": trust.DevEntitlementIssuer, "aud": trust.DevAudience, "sub": Account,
		"iat": n, "exp": n + 300, "jti": randomID("jti_"),
		"booking_id": Booking, "booking_state": "completed", "training_eligible": true,
		"gpu":                    map[string]any{"type": hw["gpu_type"], "nodes": nodes, "gpus_per_node": hw["gpus_per_node"]},
		"region":                 hw["region"],
		"fabric":                 map[string]any{"type": hw["fabric"], "gbps_per_gpu": 200},
		"term":                   map[string]any{"start": n - 3600, "end": n + 30*24*3600},
		"price_per_gpu_hour_usd": "2.49",
	}
}

// OfflineRef is the confirmation reference of an offline input whose
// confirmation claims name none.
const OfflineRef = "cfr_00000000000000000000000000000000"

// OfflineFacts are the policy input facts (admission.Input) of a
// train.create of manifest raw (doc is its decoded form) as the server has
// them once every check passed: every signature verified (key id
// "offline"), nothing consumed or seen in the ledger, no eval reports and
// nothing held on the booking (set Ledger.Booking for another usage). ent
// and conf replace the default claims when non-nil: EntitlementClaims,
// and a confirmation binding the manifest digest with cost_usd = the
// budget ceiling. `itogate eval`, the policy benchmarks and the load
// generator use it, so they evaluate the document the server would.
func OfflineFacts(raw []byte, doc, ent, conf map[string]any, now time.Time) admission.Input {
	digest := manifest.Digest(raw)
	if ent == nil {
		ent = EntitlementClaims(doc, now)
	}
	if conf == nil {
		budget, _ := doc["budget"].(map[string]any)
		conf = map[string]any{
			"iss": trust.DevConfirmationIssuer, "aud": trust.DevAudience,
			"sub": ent["sub"], "iat": now.Unix(), "exp": now.Unix() + 600, "jti": "offline", "act": "train.create",
			"booking_id": ent["booking_id"], "manifest_digest": digest, "cost_usd": budget["ceiling_usd"], "run_id": "",
		}
	}
	ref, _ := conf["ref"].(string)
	if ref == "" {
		ref = OfflineRef
	}
	account, _ := ent["sub"].(string)
	bookingID, _ := ent["booking_id"].(string)
	sig := admission.VerifiedBy("offline")
	return admission.Input{
		Now:    now,
		Leeway: admission.Leeway{Entitlement: verify.DefaultLeeway, Confirmation: verify.DefaultLeeway},
		Request: api.AdmissionRequest{Action: api.TrainCreate, BookingID: bookingID, IdempotencyKey: "offline",
			ConfirmationRef: ref},
		RequestDigest:  digest,
		Caller:         admission.Caller{Subject: "offline", Account: account, KeyID: "offline"},
		ManifestDigest: digest,
		Manifest:       doc,
		Verification:   admission.Verification{Caller: sig, ManifestSignature: &sig, Entitlement: sig, Confirmation: sig},
		Entitlement:    ent,
		Confirmation:   conf,
		Ledger:         admission.LedgerFacts{Booking: &admission.BookingFacts{}},
	}
}

// OfflineInput is the document of OfflineFacts (docs/policy-input.md),
// with the training facts of model (the deciding engine's Facts; nil
// leaves them out).
func OfflineInput(raw []byte, doc, ent, conf map[string]any, now time.Time, model *trainfacts.Model) map[string]any {
	in := OfflineFacts(raw, doc, ent, conf, now)
	in.Facts = model
	return in.Document()
}

// EntitlementFor mints an entitlement token with EntitlementClaims; tweak
// may change claims before signing.
func (r *Runner) EntitlementFor(m Manifest, tweak func(map[string]any)) (string, error) {
	claims := EntitlementClaims(m.Doc, r.now())
	if tweak != nil {
		tweak(claims)
	}
	return r.mint(r.keys.Entitlement, config.TypeEntitlement, claims, 5*time.Minute)
}

// EntitlementForRuns mints an entitlement like EntitlementFor, for booking
// (Booking when empty), whose booking holds at least runs concurrent runs
// of m (never fewer than BookingScale): their GPUs, and their checkpoints
// (storage_quota_gib: RunStorageGiB a run). Benchmarks and load tests
// admit as many runs on one booking as the machine's speed allows in their
// time, and every allowed run holds its GPUs and keeps its checkpoints
// until its declared end: a booking of the tier's quota would deny the
// rest CHECKPOINT_CAPACITY_EXCEEDED, one of BookingScale runs
// BOOKING_CAPACITY_EXCEEDED. A booking books at most 2^20 nodes
// (booking.ForCreate), which bounds runs: beyond it, use more bookings.
func (r *Runner) EntitlementForRuns(m Manifest, booking string, runs int64) (string, error) {
	scale := max(BookingScale, runs)
	claims := bookingClaims(m.Doc, r.now(), scale)
	claims["storage_quota_gib"] = scale * RunStorageGiB
	if booking != "" {
		claims["booking_id"] = booking
	}
	return r.mint(r.keys.Entitlement, config.TypeEntitlement, claims, 5*time.Minute)
}

// RunStorageGiB is the checkpoint storage EntitlementForRuns books a run:
// 64 TiB, above what any fixture keeps (DeepSeek-V3's two checkpoints of
// 671e9 parameters × 12 bytes are about 15 TiB).
const RunStorageGiB = 65536

// Confirm mints a confirmation for act, deposits it and returns its ref.
func (r *Runner) Confirm(ctx context.Context, act, manifestDigest, cost, runID string) (string, error) {
	return r.ConfirmWith(ctx, act, manifestDigest, cost, runID, nil)
}

// ConfirmWith is Confirm with tweak applied to the claims before signing
// (e.g. another booking_id).
func (r *Runner) ConfirmWith(ctx context.Context, act, manifestDigest, cost, runID string, tweak func(map[string]any)) (string, error) {
	claims := map[string]any{
		"iss": trust.DevConfirmationIssuer, "aud": trust.DevAudience, "sub": Account,
		"act": act, "booking_id": Booking, "manifest_digest": manifestDigest, "cost_usd": cost,
	}
	if runID != "" {
		claims["run_id"] = runID
	}
	if tweak != nil {
		tweak(claims)
	}
	tok, err := r.mint(r.keys.Confirmation, config.TypeConfirmation, claims, 10*time.Minute)
	if err != nil {
		return "", err
	}
	return r.depositor.DepositRef(ctx, tok)
}

// Answer is a parsed envelope.
type Answer struct {
	Status int
	api.Envelope[api.AdmissionData]
}

// Codes are the violation codes (or the error code when there are none).
func (a Answer) Codes() []string {
	if a.Error == nil {
		return nil
	}
	var out []string
	for _, v := range a.Error.Violations {
		out = append(out, string(v.Code))
	}
	if len(out) == 0 {
		out = []string{string(a.Error.Code)}
	}
	sort.Strings(out)
	return out
}

// Admit posts an admission as the demo caller.
func (r *Runner) Admit(ctx context.Context, req api.AdmissionRequest) (Answer, error) {
	resp, err := r.caller.Admit(ctx, req)
	if err != nil {
		return Answer{}, err
	}
	return parse(resp)
}

// Status asks for the stored admission of key.
func (r *Runner) Status(ctx context.Context, key string) (Answer, error) {
	resp, err := r.caller.Status(ctx, key)
	if err != nil {
		return Answer{}, err
	}
	return parse(resp)
}

// RunStatus asks GET /v1/runs/{run_id} as the demo caller.
func (r *Runner) RunStatus(ctx context.Context, runID string) (int, api.Envelope[api.RunStatus], error) {
	var env api.Envelope[api.RunStatus]
	resp, err := r.caller.Run(ctx, runID)
	if err != nil {
		return 0, env, err
	}
	if err := json.Unmarshal(resp.Body, &env); err != nil {
		return resp.Status, env, fmt.Errorf("HTTP %d: not an envelope", resp.Status)
	}
	return resp.Status, env, nil
}

func parse(resp client.Response) (Answer, error) {
	var a Answer
	if err := json.Unmarshal(resp.Body, &a); err != nil {
		return Answer{}, fmt.Errorf("HTTP %d: not an envelope", resp.Status)
	}
	a.Status = resp.Status
	return a, nil
}

// Key returns a fresh idempotency key.
func (r *Runner) Key(prefix string) string {
	r.seq++
	return fmt.Sprintf("%s-%d-%s", prefix, r.seq, randomID("")[:8])
}

// Create admits train.create for a fixture manifest with its own fresh
// entitlement and confirmation (cost = the manifest's ceiling).
func (r *Runner) Create(ctx context.Context, m Manifest, key string) (Answer, api.AdmissionRequest, error) {
	return r.CreateWith(ctx, m, key, nil)
}

// CreateWith is Create with tweak applied to the entitlement's claims
// before signing (e.g. a jti of the caller's choosing).
func (r *Runner) CreateWith(ctx context.Context, m Manifest, key string, tweak func(map[string]any)) (Answer, api.AdmissionRequest, error) {
	ent, err := r.EntitlementFor(m, tweak)
	if err != nil {
		return Answer{}, api.AdmissionRequest{}, err
	}
	budget, _ := m.Doc["budget"].(map[string]any)
	cost, _ := budget["ceiling_usd"].(string)
	ref, err := r.Confirm(ctx, "train.create", manifest.Digest(m.Raw), cost, "")
	if err != nil {
		return Answer{}, api.AdmissionRequest{}, err
	}
	req := api.AdmissionRequest{
		Action: "train.create", BookingID: Booking, IdempotencyKey: key,
		Manifest: m.Raw, ManifestSignature: m.Signature, EntitlementToken: ent, ConfirmationRef: ref,
	}
	a, err := r.Admit(ctx, req)
	return a, req, err
}

// Expect is an expected answer: status and exact sorted codes (none = allow).
type Expect struct {
	Status int
	Codes  []string
}

func (e Expect) String() string {
	if len(e.Codes) == 0 {
		return fmt.Sprintf("%d allow", e.Status)
	}
	return fmt.Sprintf("%d %s", e.Status, strings.Join(e.Codes, "+"))
}

func check(name string, want Expect, got Answer, err error) Result {
	if err != nil {
		return Result{Name: name, Expected: want.String(), Got: "error: " + err.Error()}
	}
	g := Expect{Status: got.Status, Codes: got.Codes()}
	return Result{Name: name, Expected: want.String(), Got: g.String(),
		Pass: g.String() == want.String()}
}

// FixtureCase is one entry of fixtures/cases/policy-cases.json.
type FixtureCase struct {
	Manifest string   `json:"manifest"`
	Allow    bool     `json:"allow"`
	Codes    []string `json:"codes"`
}

func randomID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// RevokerToken mints a development revoker bearer token (the entitlement
// issuer's revocation identity).
func (r *Runner) RevokerToken() (string, error) {
	return r.mint(r.keys.Revoker, "", map[string]any{
		"iss": trust.DevRevokerIssuer, "aud": trust.DevRevokeAudience, "sub": "dev-backend-revoker",
	}, time.Hour)
}

// DepositorToken mints a development depositor bearer token (the
// confirmation authority's identity).
func (r *Runner) DepositorToken() (string, error) {
	return r.mint(r.keys.Depositor, "", map[string]any{
		"iss": trust.DevDepositorIssuer, "aud": trust.DevDepositAudience, "sub": "dev-desk",
	}, time.Hour)
}

// Post sends body as JSON to path with bearer and returns the status and
// the envelope text.
func (r *Runner) Post(ctx context.Context, path, bearer string, body map[string]any) (int, string, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+path, bytes.NewReader(raw))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(out), err
}

// OfflinePlanInput builds each proposed manifest's offline input as
// `itogate eval` does: the entitlement claims ent as given (their
// telemetry claim included; `itogate eval --entitlement`), or when ent is
// nil an entitlement for exactly the planned hardware (of base, the
// manifest the plan started from), and a confirmation binding the
// proposed manifest's digest. A proposal the manifest schema refuses is
// skipped.
func OfflinePlanInput(base, ent map[string]any, now time.Time) policy.PlanInput {
	if ent == nil {
		ent = ExactEntitlementClaims(base, now)
	}
	return func(m map[string]any) (map[string]any, error) {
		raw, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		doc, err := manifest.Parse(raw)
		if err != nil {
			return nil, err
		}
		return OfflineInput(raw, doc, ent, nil, now, nil), nil
	}
}
