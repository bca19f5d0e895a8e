package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// stub is an itogate stand-in answering every request with one status and
// envelope, counting requests by method.
type stub struct {
	srv         *httptest.Server
	posts, gets atomic.Int64
}

func newStub(t *testing.T, status int, code string) *stub {
	t.Helper()
	s := &stub{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			s.posts.Add(1)
		} else {
			s.gets.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if status == 200 {
			_, _ = w.Write([]byte(`{"ok":true,"live_api_contacted":false,"notice":"stored admission","data":{"decision":"allow","action":"train.cancel","run_id":"run_x","state":"cancel_admitted","decision_id":"dec_1","gpus":0}}`))
			return
		}
		_, _ = w.Write([]byte(`{"ok":false,"live_api_contacted":false,"notice":"","error":{"code":"` + code + `","message":"m"}}`))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// clientFiles writes a caller token and an entitlement token file.
func exitClientFiles(t *testing.T) (tokenFile, entFile string) {
	t.Helper()
	dir := t.TempDir()
	tokenFile, entFile = filepath.Join(dir, "caller.jwt"), filepath.Join(dir, "ent.jwt")
	for _, f := range []string{tokenFile, entFile} {
		if err := os.WriteFile(f, []byte("a.b.c\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return tokenFile, entFile
}

func cancelArgs(url, tokenFile, entFile string, extra ...string) []string {
	return append([]string{"train", "--server", url, "--token-file", tokenFile, "--entitlement-file", entFile,
		"--action", "train.cancel", "--run-id", "run_x", "--booking", "bk_1",
		"--confirmation-ref", "cfr_" + strings.Repeat("0", 32), "--idempotency-key", "k1"}, extra...)
}

func wantEnvelope(t *testing.T, stdout string, code api.Code) {
	t.Helper()
	var env struct {
		OK    bool `json:"ok"`
		Error *struct {
			Code api.Code `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(stdout), &env); err != nil || env.OK || env.Error == nil || env.Error.Code != code {
		t.Fatalf("stdout %q is not the envelope of %s", stdout, code)
	}
}

// TestTrainExitCodes: every kind of answer has its documented exit code;
// with --json stdout is the envelope.
func TestTrainExitCodes(t *testing.T) {
	tok, ent := exitClientFiles(t)
	for _, tc := range []struct {
		status int
		code   api.Code
		exit   int
	}{
		{200, "", 0},
		{403, "CONFIRMATION_REPLAYED", exitDenied},
		{409, "IDEMPOTENCY_KEY_CONFLICT", exitDenied},
		{400, "REQUEST_INVALID", exitFailed},
		{413, "REQUEST_TOO_LARGE", exitFailed},
		{401, "CALLER_UNAUTHENTICATED", exitUnauthenticated},
		{503, "LEDGER_UNAVAILABLE", exitUnavailable},
		{408, "REQUEST_TIMEOUT", exitUnavailable},
		{401, "CALLER_REVOKED", exitRevoked},
		{403, "CONFIRMATION_REVOKED", exitRevoked},
		{403, "ENTITLEMENT_REVOKED", exitRevoked},
	} {
		t.Run(string(tc.code), func(t *testing.T) {
			s := newStub(t, tc.status, string(tc.code))
			res := runCLI(t, cancelArgs(s.srv.URL, tok, ent, "--json")...)
			if res.exit != tc.exit {
				t.Fatalf("exit %d, want %d (stderr %q)", res.exit, tc.exit, res.stderr)
			}
			if tc.status != 200 {
				wantEnvelope(t, res.stdout, tc.code)
			}
			// A definite answer is never retried, nor followed by a
			// status lookup: one POST, no GET.
			if s.posts.Load() != 1 || s.gets.Load() != 0 {
				t.Fatalf("%d POSTs and %d GETs, want exactly one POST", s.posts.Load(), s.gets.Load())
			}
		})
	}
}

// TestStatusExitCodes: status answers 0 found, 3 not found, 7 revoked.
func TestStatusExitCodes(t *testing.T) {
	tok, _ := exitClientFiles(t)
	for _, tc := range []struct {
		status int
		code   api.Code
		exit   int
	}{
		{200, "", 0},
		{404, "ADMISSION_NOT_FOUND", exitNotFound},
		{401, "CALLER_REVOKED", exitRevoked},
		{401, "CALLER_UNAUTHENTICATED", exitUnauthenticated},
	} {
		s := newStub(t, tc.status, string(tc.code))
		res := runCLI(t, "status", "--server", s.srv.URL, "--token-file", tok, "--idempotency-key", "k1", "--json")
		if res.exit != tc.exit || s.gets.Load() != 1 {
			t.Fatalf("%s: exit %d after %d GETs, want %d after one", tc.code, res.exit, s.gets.Load(), tc.exit)
		}
	}
}

// TestClientLocalFailuresJSON: a refusal before anything is sent and a
// server that cannot be reached both print one envelope on stdout with
// --json, with their own codes and exit codes, and nothing on stdout
// without it.
func TestClientLocalFailuresJSON(t *testing.T) {
	tok, ent := exitClientFiles(t)
	s := newStub(t, 200, "")

	res := runCLI(t, append(cancelArgs(s.srv.URL, tok, ent, "--json"), "--connect-timeout", "0s")...)
	if res.exit != exitFailed || s.posts.Load() != 0 {
		t.Fatalf("bad flag: exit %d, %d posts", res.exit, s.posts.Load())
	}
	wantEnvelope(t, res.stdout, api.CodeClientInput)

	res = runCLI(t, "train", "--server", s.srv.URL, "--token-file", tok, "--entitlement-file", ent,
		"--booking", "bk_1", "--confirmation-ref", "cfr_"+strings.Repeat("0", 32), "--idempotency-key", "k1",
		"--manifest", filepath.Join(t.TempDir(), "missing.json"), "--json")
	if res.exit != exitFailed || s.posts.Load() != 0 {
		t.Fatalf("missing manifest: exit %d, %d posts", res.exit, s.posts.Load())
	}
	var env map[string]any
	if err := json.Unmarshal([]byte(res.stdout), &env); err != nil || env["ok"] != false {
		t.Fatalf("missing manifest: stdout %q is not an envelope", res.stdout)
	}

	// Nothing listens: a transport failure, exit 5, the envelope on stdout.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	res = runCLI(t, cancelArgs(dead, tok, ent, "--json", "--timeout", "5s")...)
	if res.exit != exitUnavailable {
		t.Fatalf("dead server: exit %d (%q %q)", res.exit, res.stdout, res.stderr)
	}
	var e struct {
		Error api.ErrorBody `json:"error"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &e); err != nil ||
		(e.Error.Code != api.CodeClientTransport && e.Error.Code != api.CodeClientTimeout) || !strings.Contains(e.Error.Message, "status") {
		t.Fatalf("dead server: stdout %q", res.stdout)
	}
	res = runCLI(t, cancelArgs(dead, tok, ent, "--timeout", "5s")...)
	if res.exit != exitUnavailable || res.stdout != "" || !strings.Contains(res.stderr, "CLIENT_") {
		t.Fatalf("dead server without --json: exit %d stdout %q stderr %q", res.exit, res.stdout, res.stderr)
	}
}

// TestClientOverallTimeout: a server that never answers is bounded by
// --timeout: exit 5 CLIENT_TIMEOUT (no wall-clock assertion).
func TestClientOverallTimeout(t *testing.T) {
	tok, ent := exitClientFiles(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	res := runCLI(t, cancelArgs(srv.URL, tok, ent, "--json", "--timeout", "300ms", "--connect-timeout", "100ms")...)
	if res.exit != exitUnavailable {
		t.Fatalf("exit %d (%q)", res.exit, res.stdout)
	}
	wantEnvelope(t, res.stdout, api.CodeClientTimeout)
}

// TestClientNonEnvelopeAnswer: an answer that is not an envelope (a proxy's
// page, net/http's bare 431) is no definite answer: exit 5 and, with
// --json, the client's own envelope on stdout.
func TestClientNonEnvelopeAnswer(t *testing.T) {
	tok, ent := exitClientFiles(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
		_, _ = w.Write([]byte("431 Request Header Fields Too Large"))
	}))
	defer srv.Close()
	res := runCLI(t, cancelArgs(srv.URL, tok, ent, "--json")...)
	if res.exit != exitUnavailable {
		t.Fatalf("exit %d (%q)", res.exit, res.stdout)
	}
	wantEnvelope(t, res.stdout, api.CodeClientResponse)
}

// TestTrainActionFlags: for every action and every action-dependent flag
// of itogate train, a required flag left out, and a flag the action does
// not take given, exit 4 with CLIENT_INPUT_INVALID naming the flag before
// any request (the stub sees none); the full command line of each action
// sends exactly one POST carrying its fields. An unknown action and more
// than 16 eval-authority tokens are refused alike.
func TestTrainActionFlags(t *testing.T) {
	tok, ent := exitClientFiles(t)
	dir := t.TempDir()
	m := filepath.Join(dir, "m.json")
	writeMode(t, m, []byte("{}"), 0o600)
	writeMode(t, m+".sig", []byte("sig"), 0o600)
	report := filepath.Join(dir, "report.jws")
	writeMode(t, report, []byte("a.b.c\n"), 0o600)
	value := map[string][]string{"manifest": {"--manifest", m}, "signature": {"--signature", m + ".sig"},
		"run-id": {"--run-id", "run_x"}, "stage": {"--stage", "sft"}, "checkpoint-step": {"--checkpoint-step", "500"},
		"eval-report": {"--eval-report", report}, "ladder-decision": {"--ladder-decision", report},
		"release-booking": {"--release-booking"}}
	base := func(url string, action api.Action) []string {
		return []string{"train", "--server", url, "--token-file", tok, "--entitlement-file", ent, "--action", string(action),
			"--booking", "bk_1", "--confirmation-ref", "cfr_" + strings.Repeat("0", 32), "--idempotency-key", "k1", "--json"}
	}
	for _, spec := range api.Actions() {
		var full []string
		for _, f := range trainFlags {
			if f.takes(spec) {
				full = append(full, value[f.name]...)
			}
		}
		for _, f := range trainFlags {
			s := newStub(t, 200, "")
			args := base(s.srv.URL, spec.Action)
			var says string
			switch {
			case f.takes(spec) && f.required:
				args, says = append(args, without(full, value[f.name])...), "--"+f.name+" is required for "+string(spec.Action)
			case !f.takes(spec):
				args, says = append(append(args, full...), value[f.name]...), "--"+f.name+" is not a flag of "+string(spec.Action)
			default:
				continue
			}
			res := runCLI(t, args...)
			if res.exit != exitFailed || s.posts.Load()+s.gets.Load() != 0 || !strings.Contains(res.stdout, says) {
				t.Errorf("%s --%s: exit %d after %d requests, stdout %q; want exit %d naming %q before any request",
					spec.Action, f.name, res.exit, s.posts.Load()+s.gets.Load(), res.stdout, exitFailed, says)
			}
		}
		var got []api.AdmissionRequest
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var req api.AdmissionRequest
			_ = json.NewDecoder(r.Body).Decode(&req)
			got = append(got, req)
			_, _ = w.Write([]byte(`{"ok":true,"data":{"decision":"allow"}}`))
		}))
		res := runCLI(t, append(base(srv.URL, spec.Action), full...)...)
		srv.Close()
		want := api.AdmissionRequest{Action: spec.Action, BookingID: "bk_1", IdempotencyKey: "k1",
			ConfirmationRef: "cfr_" + strings.Repeat("0", 32), EntitlementToken: "a.b.c"}
		if spec.Manifest {
			want.Manifest, want.ManifestSignature = []byte("{}"), "sig"
		}
		if spec.Action.ActsOnRun() {
			want.RunID = "run_x"
		}
		if spec.Stage {
			want.Stage = "sft"
		}
		if spec.CheckpointStep {
			want.CheckpointStep = new(int64(500))
		}
		if spec.EvalReports {
			want.EvalReports = []string{"a.b.c"}
		}
		want.ReleasesBooking = spec.ReleasesBooking
		if res.exit != 0 || len(got) != 1 || !reflect.DeepEqual(got[0], want) {
			t.Errorf("%s with its flags %v: exit %d (stderr %q), sent %+v\nwant %+v", spec.Action, full, res.exit, res.stderr, got, want)
		}
	}
	s := newStub(t, 200, "")
	for what, args := range map[string][]string{
		"an unknown action": append(base(s.srv.URL, "train.rewind"), "--run-id", "run_x"),
		"17 eval reports":   append(append(base(s.srv.URL, api.TrainStageAdvance), value["manifest"]...), slices.Repeat(value["eval-report"], 17)...),
	} {
		if res := runCLI(t, args...); res.exit != exitFailed || s.posts.Load() != 0 {
			t.Errorf("%s: exit %d after %d POSTs", what, res.exit, s.posts.Load())
		}
	}
}

// TestTrainRestartFromStepZero: --checkpoint-step 0 sends
// "checkpoint_step":0, an explicit step the server tells apart from none.
func TestTrainRestartFromStepZero(t *testing.T) {
	tok, ent := exitClientFiles(t)
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		_, _ = w.Write([]byte(`{"ok":true,"data":{"decision":"allow"}}`))
	}))
	defer srv.Close()
	res := runCLI(t, "train", "--server", srv.URL, "--token-file", tok, "--entitlement-file", ent,
		"--action", "train.restart", "--run-id", "run_x", "--checkpoint-step", "0",
		"--booking", "bk_1", "--confirmation-ref", "cfr_"+strings.Repeat("0", 32), "--idempotency-key", "k1", "--json")
	if res.exit != 0 || len(bodies) != 1 || !strings.Contains(bodies[0], `"checkpoint_step":0`) {
		t.Fatalf("exit %d (stderr %q), sent %q; want one request with \"checkpoint_step\":0", res.exit, res.stderr, bodies)
	}
}

// without is args without the flag and value of drop.
func without(args, drop []string) []string {
	out := slices.Clone(args)
	if i := slices.Index(out, drop[0]); i >= 0 {
		out = slices.Delete(out, i, i+len(drop))
	}
	return out
}

// TestTrainActionFlagsInREADME: the README's table of the actions' own
// flags has a row per action naming exactly the flags trainFlags gives it,
// optional ones in brackets.
func TestTrainActionFlagsInREADME(t *testing.T) {
	readme := string(mustRead(t, filepath.Join("..", "..", "README.md")))
	for _, spec := range api.Actions() {
		i := strings.Index(readme, "\n| `"+string(spec.Action)+"`")
		if i < 0 {
			t.Errorf("README.md: no row for %s in the table of the actions' flags", spec.Action)
			continue
		}
		row := readme[i+1 : i+1+strings.IndexByte(readme[i+1:], '\n')]
		for _, f := range trainFlags {
			bare, optional := strings.Contains(row, "`--"+f.name), strings.Contains(row, "`[--"+f.name)
			switch {
			case !f.takes(spec) && (bare || optional):
				t.Errorf("README.md's row of %s names --%s, which it does not take: %s", spec.Action, f.name, row)
			case f.takes(spec) && f.required != bare, f.takes(spec) && !f.required != optional:
				t.Errorf("README.md's row of %s shows --%s wrong (required: %v): %s", spec.Action, f.name, f.required, row)
			}
		}
	}
}
