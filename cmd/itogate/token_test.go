package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// tokenEpoch is the clock of the token tests (Unix seconds): every iat and
// exp is exact.
const tokenEpoch = 1_900_000_000

func tokenNow() time.Time { return time.Unix(tokenEpoch, 0) }

// mintToken runs `itogate token ARGS` at tokenNow with env as the
// environment and returns its standard output and error.
func mintToken(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newTokenCmd(tokenDeps{stdout: &out, stderr: &errOut,
		getenv: func(k string) string { return env[k] }, now: tokenNow})
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err = cmd.Execute()
	return strings.TrimSpace(out.String()), errOut.String(), err
}

// devTrust is the development verifier set, one verifier per purpose.
func devTrust(t *testing.T) *trust.Set {
	t.Helper()
	set, err := trust.Dev()
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// tokenManifest copies the llama3-8b fixture into a private file (whatever
// the checkout's umask) and returns its path and digest.
func tokenManifest(t *testing.T) (path, digest string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "manifest.json")
	writeMode(t, path, mustRead(t, filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json")), 0o600)
	_, digest, err := safefile.ReadManifest(path, manifest.MaxBytes)
	if err != nil {
		t.Fatal(err)
	}
	return path, digest
}

var hexJTI = regexp.MustCompile(`^[0-9a-f]{32}$`)

// checkToken verifies tok with v at tokenNow and checks that its header and
// claims are exactly want (jti aside: a fresh 128-bit hex value).
func checkToken(t *testing.T, tok string, v *verify.TokenVerifier, wantHeader, wantClaims map[string]any) {
	t.Helper()
	c, err := v.Verify([]byte(tok), tokenNow())
	if err != nil {
		t.Fatalf("the %s verifier refused the token: %v", v.Purpose(), err)
	}
	if !hexJTI.MatchString(c.JTI) {
		t.Errorf("jti = %q, want 32 hex digits", c.JTI)
	}
	got := c.Raw
	delete(got, "jti")
	if !reflect.DeepEqual(got, wantClaims) {
		t.Errorf("claims:\n got %v\nwant %v", got, wantClaims)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
	if err != nil {
		t.Fatal(err)
	}
	var header map[string]any
	if err := json.Unmarshal(raw, &header); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(header, wantHeader) {
		t.Errorf("header = %v, want %v", header, wantHeader)
	}
}

// at is a Unix time tokenNow plus d, as a verified claim holds it.
func at(d time.Duration) int64 { return tokenEpoch + int64(d/time.Second) }

func TestTokenCaller(t *testing.T) {
	tok, _, err := mintToken(t, nil, "caller", "--account", "acct_42", "--subject", "svc-x", "--ttl", "2h")
	if err != nil {
		t.Fatal(err)
	}
	checkToken(t, tok, devTrust(t).Callers, map[string]any{"alg": "ES256", "kid": "dev-caller-1"}, map[string]any{
		"iss": trust.DevCallerIssuer, "aud": trust.DevAudience, "sub": "svc-x", "account": "acct_42",
		"iat": at(0), "exp": at(2 * time.Hour),
	})
}

func TestTokenDepositor(t *testing.T) {
	tok, _, err := mintToken(t, nil, "depositor", "--subject", "desk")
	if err != nil {
		t.Fatal(err)
	}
	checkToken(t, tok, devTrust(t).Depositors, map[string]any{"alg": "ES256", "kid": "dev-depositor-1"}, map[string]any{
		"iss": trust.DevDepositorIssuer, "aud": trust.DevDepositAudience, "sub": "desk",
		"iat": at(0), "exp": at(time.Hour),
	})
}

func TestTokenRevoker(t *testing.T) {
	tok, _, err := mintToken(t, nil, "revoker")
	if err != nil {
		t.Fatal(err)
	}
	checkToken(t, tok, devTrust(t).Revokers, map[string]any{"alg": "ES256", "kid": "dev-revoker-1"}, map[string]any{
		"iss": trust.DevRevokerIssuer, "aud": trust.DevRevokeAudience, "sub": "svc-dev-trainer",
		"iat": at(0), "exp": at(time.Hour),
	})
}

func TestTokenEntitlement(t *testing.T) {
	path, _ := tokenManifest(t)
	tok, stderr, err := mintToken(t, nil, "entitlement", "--manifest", path, "--account", "acct_42",
		"--booking", "bk_42", "--region", "eu-west-1", "--issued-ago", "1m")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "stale 300 s later") {
		t.Errorf("stderr does not say when the entitlement goes stale: %q", stderr)
	}
	iat := at(-time.Minute)
	checkToken(t, tok, devTrust(t).Entitlement,
		map[string]any{"alg": "ES256", "kid": "dev-entitlement-1", "typ": config.TypeEntitlement}, map[string]any{
			"iss": trust.DevEntitlementIssuer, "aud": trust.DevAudience, "sub": "acct_42",
			"iat": iat, "exp": iat + 300,
			"booking_id": "bk_42", "booking_state": "completed", "training_eligible": true,
			"gpu":                    map[string]any{"type": "A100-80GB", "nodes": int64(8), "gpus_per_node": int64(8)},
			"region":                 "eu-west-1", // the flag wins over the manifest
			"fabric":                 map[string]any{"type": "infiniband-hdr-200g", "gbps_per_gpu": int64(200)},
			"term":                   map[string]any{"start": iat - 3600, "end": iat + 30*24*3600},
			"price_per_gpu_hour_usd": "2.49",
		})
	if _, _, err := mintToken(t, nil, "entitlement", "--gpu", "H100"); err == nil ||
		!strings.Contains(err.Error(), "give --manifest, or all of") {
		t.Errorf("entitlement without --manifest or the full topology: %v", err)
	}
}

func TestTokenConfirmation(t *testing.T) {
	path, digest := tokenManifest(t)
	tok, stderr, err := mintToken(t, nil, "confirmation", "--manifest", path, "--act", "train.restart",
		"--run-id", "run_1", "--checkpoint-step", "500")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "confirmation expires at") {
		t.Errorf("stderr does not say when the confirmation expires: %q", stderr)
	}
	checkToken(t, tok, devTrust(t).Confirmation,
		map[string]any{"alg": "ES256", "kid": "dev-confirmation-1", "typ": config.TypeConfirmation}, map[string]any{
			"iss": trust.DevConfirmationIssuer, "aud": trust.DevAudience, "sub": "acct_dev",
			"iat": at(0), "exp": at(10 * time.Minute),
			"act": "train.restart", "booking_id": "bk_dev_01", "manifest_digest": digest,
			"cost_usd": "2000.00", // the manifest's budget ceiling
			"run_id":   "run_1", "checkpoint_step": int64(500),
		})
	if _, _, err := mintToken(t, nil, "confirmation"); err == nil || !strings.Contains(err.Error(), "--cost is required") {
		t.Errorf("confirmation without --manifest or --cost: %v", err)
	}
	// A cancel spends nothing new: without --manifest its cost defaults to 0.00.
	tok, _, err = mintToken(t, nil, "confirmation", "--act", "train.cancel", "--run-id", "run_1")
	if err != nil {
		t.Fatalf("a cancel confirmation without --cost: %v", err)
	}
	checkToken(t, tok, devTrust(t).Confirmation,
		map[string]any{"alg": "ES256", "kid": "dev-confirmation-1", "typ": config.TypeConfirmation}, map[string]any{
			"iss": trust.DevConfirmationIssuer, "aud": trust.DevAudience, "sub": "acct_dev",
			"iat": at(0), "exp": at(10 * time.Minute),
			"act": "train.cancel", "booking_id": "bk_dev_01", "manifest_digest": "", "cost_usd": "0.00", "run_id": "run_1",
		})
}

// TestTokenConfirmationDeposit: --deposit posts the confirmation to
// --server as the development depositor and prints the reference.
func TestTokenConfirmationDeposit(t *testing.T) {
	set := devTrust(t)
	var deposited string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bearer := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if _, err := set.Depositors.Verify([]byte(bearer), tokenNow()); err != nil || r.URL.Path != "/v1/confirmations" {
			t.Errorf("%s %s: depositor token: %v", r.Method, r.URL.Path, err)
		}
		var body struct {
			Token string `json:"confirmation_token"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		deposited = body.Token
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"ok":true,"data":{"confirmation_ref":"cfr_test"}}`))
	}))
	defer srv.Close()
	ref, _, err := mintToken(t, map[string]string{"ITOGATE_URL": srv.URL}, "confirmation", "--cost", "1.00", "--deposit")
	if err != nil || ref != "cfr_test" {
		t.Fatalf("deposit printed %q, %v; want cfr_test", ref, err)
	}
	if c, err := set.Confirmation.Verify([]byte(deposited), tokenNow()); err != nil || c.Raw["cost_usd"] != "1.00" {
		t.Fatalf("deposited confirmation: %v, %v", c, err)
	}
}

func TestTokenEvalReport(t *testing.T) {
	path, digest := tokenManifest(t)
	tok, _, err := mintToken(t, nil, "eval-report", "--run-id", "run_1", "--stage", "mid_train", "--manifest", path,
		"--result", "mmlu_5shot=0.31", "--result", "passes=2")
	if err != nil {
		t.Fatal(err)
	}
	checkToken(t, tok, devTrust(t).Evals,
		map[string]any{"alg": "ES256", "kid": "dev-evals-1", "typ": config.TypeEvals}, map[string]any{
			"iss": trust.DevEvalsIssuer, "aud": trust.DevEvalsAudience, "sub": "dev-evals",
			"iat": at(0), "exp": at(10 * time.Minute),
			"kind": "eval_report", "run_id": "run_1", "stage": "mid_train", "manifest_digest": digest,
			"battery_id": "ito-battery-mid-train-2026.10",
			"results":    map[string]any{"mmlu_5shot": 0.31, "passes": int64(2)},
		})
	for _, args := range [][]string{
		{"eval-report", "--run-id", "run_1", "--stage", "pretrain"},
		{"eval-report", "--run-id", "run_1", "--stage", "pretrain", "--manifest", path, "--result", "mmlu=high"},
	} {
		if _, _, err := mintToken(t, nil, args...); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}

func TestTokenLadderDecision(t *testing.T) {
	tok, _, err := mintToken(t, nil, "ladder-decision", "--dataset-digest", "sha256:"+strings.Repeat("ab", 32),
		"--outcome", "stop", "--ttl", "1m")
	if err != nil {
		t.Fatal(err)
	}
	checkToken(t, tok, devTrust(t).Evals,
		map[string]any{"alg": "ES256", "kid": "dev-evals-1", "typ": config.TypeEvals}, map[string]any{
			"iss": trust.DevEvalsIssuer, "aud": trust.DevEvalsAudience, "sub": "dev-evals",
			"iat": at(0), "exp": at(time.Minute),
			"kind": "ladder_decision", "dataset_digest": "sha256:" + strings.Repeat("ab", 32), "outcome": "stop",
		})
	if _, _, err := mintToken(t, nil, "ladder-decision"); err == nil || !strings.Contains(err.Error(), "dataset-digest") {
		t.Errorf("ladder-decision without --dataset-digest: %v", err)
	}
}

// TestTokenRefusesAnotherKindsFlag: each kind takes only its own flags; a
// flag of another kind is refused, naming the kinds that take it.
func TestTokenRefusesAnotherKindsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"caller", "--manifest", "x"}, "itogate token caller does not take --manifest: it is a flag of itogate token confirmation, entitlement, eval-report"},
		{[]string{"depositor", "--account", "a"}, "itogate token depositor does not take --account: it is a flag of itogate token caller, confirmation, entitlement"},
		{[]string{"revoker", "--deposit"}, "itogate token revoker does not take --deposit: it is a flag of itogate token confirmation"},
		{[]string{"entitlement", "--cost", "1"}, "does not take --cost: it is a flag of itogate token confirmation"},
		{[]string{"confirmation", "--issued-ago=1m"}, "does not take --issued-ago: it is a flag of itogate token entitlement"},
		{[]string{"eval-report", "--outcome", "stop"}, "does not take --outcome: it is a flag of itogate token ladder-decision"},
		{[]string{"ladder-decision", "--subject", "x"}, "does not take --subject: it is a flag of itogate token caller, depositor, revoker"},
		{[]string{"caller", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"bogus"}, `unknown command "bogus" for "itogate token"`},
		{[]string{}, "name the kind of token: itogate token caller|confirmation|depositor|entitlement|eval-report|ladder-decision|revoker"},
	} {
		out, _, err := mintWithRoot(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("token %v: %v, want an error saying %q", tc.args, err, tc.want)
		}
		if out != "" {
			t.Errorf("token %v printed %q", tc.args, out)
		}
	}
}
