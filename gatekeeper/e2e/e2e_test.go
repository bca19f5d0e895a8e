// Package e2e holds itogate's end-to-end proofs: admissions through the real
// HTTP handler over each ledger backend, racing (one process and two
// processes sharing PostgreSQL), crashing (SIGKILL mid-load) and losing the
// ledger mid-transaction, lifecycle actions, and throughput.
//
// The PostgreSQL variants run when ITOGATE_TEST_POSTGRES_DSN names a server
// (CI sets it; each test gets a schema of its own) and skip otherwise.
// Tests that run the itogate binary build it once per package run.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/client"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ledger/postgres"
	"github.com/itocompute/itogate/gatekeeper/ledger/postgres/pgtest"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/runtime"
	"github.com/itocompute/itogate/gatekeeper/runtime/runtimetest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/internal/syncbuf"
)

// Bounds no machine hits: these tests prove ledger semantics under the race
// detector on two shared cores, where one policy evaluation costs tens of
// milliseconds and two hundred run at once (a burst of 200 at load 40 took
// over a minute each). Latency has its own tests.
const (
	policyDeadline = patience.Deadline
	requestTimeout = policyDeadline + time.Minute
	clientTimeout  = requestTimeout + time.Minute
)

// backend is one kind of ledger: it sets a test's ledger section.
type backend struct {
	name   string
	ledger func(t testing.TB, c *config.Config)
}

var backends = []backend{
	// bbolt: development mode's own, <data_dir>/ledger.db.
	{"bbolt", func(testing.TB, *config.Config) {}},
	{"postgres", func(t testing.TB, c *config.Config) {
		o := pgOptions(t)
		c.Ledger = config.Ledger{Driver: config.DriverPostgres, DSN: o.DSN, Schema: o.Schema, MaxConns: o.MaxConns,
			AcquireTimeout: config.Duration(o.AcquireTimeout), StatementTimeout: config.Duration(o.StatementTimeout),
			ConnectTimeout: config.Duration(o.ConnectTimeout)}
	}},
}

// pgOptions are store options on a fresh schema of the test server (skips
// without ITOGATE_TEST_POSTGRES_DSN). The pool and timeouts are as generous
// as the policy deadline, for the same reason: under the race detector, two
// hundred requests queue for two cores, and a goroutine holding a pooled
// connection may wait long for the CPU to hand it back. The fault tests
// check the production bounds.
func pgOptions(t testing.TB) postgres.Options {
	t.Helper()
	dsn := pgtest.DSN(t)
	return postgres.Options{DSN: dsn, Schema: pgtest.Schema(t, dsn), MaxConns: 32,
		AcquireTimeout: policyDeadline, StatementTimeout: policyDeadline, ConnectTimeout: policyDeadline}
}

// forEachBackend runs fn as a subtest per backend, against a server of its
// own (serve) and its ledger.
func forEachBackend(t *testing.T, fn func(t *testing.T, base string, store ledger.Store)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			base, store := serve(t, b)
			fn(t, base, store)
		})
	}
}

// serve starts the service in this process through the runtime, as
// `itogate serve` runs it in development mode (runtimetest), on a ledger of
// the backend's kind, and returns its base URL and its ledger. Its
// warnings are shown when the test fails.
func serve(t testing.TB, be backend) (string, ledger.Store) {
	t.Helper()
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server warnings:\n%s", tail(logs.String(), 4000))
		}
	})
	cfg := runtimetest.Config(t)
	cfg.Policy.Deadline, cfg.Limits.RequestTimeout = config.Duration(policyDeadline), config.Duration(requestTimeout)
	be.ledger(t, &cfg)
	rt := runtimetest.Open(t, cfg, runtime.Options{
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	return runtimetest.Serve(t, rt, rt.Handler()).URL, rt.Ledger()
}

// actor is one account's callers and its confirmation desk, talking to one
// itogate, with tokens minted from the development keys.
type actor struct {
	account, booking string
	base             string
	keys             keys.DevKeys
	caller, desk     *client.Client
	m                scenario.Manifest
}

func newActor(t testing.TB, base, account, booking string) *actor {
	t.Helper()
	a := &actor{account: account, booking: booking, base: base, keys: keys.Dev()}
	now := time.Now().Unix()
	callerTok, err := a.mint(a.keys.Caller, "", map[string]any{
		"iss": trust.DevCallerIssuer, "aud": trust.DevAudience, "sub": "svc-" + account, "account": account,
		"iat": now, "exp": now + 3600,
	})
	if err != nil {
		t.Fatal(err)
	}
	deskTok, err := a.mint(a.keys.Depositor, "", map[string]any{
		"iss": trust.DevDepositorIssuer, "aud": trust.DevDepositAudience, "sub": "confirmation-desk",
		"iat": now, "exp": now + 3600,
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.caller, err = client.New(client.Options{BaseURL: base, Bearer: callerTok, Attempts: 1, Timeout: clientTimeout, ConnectTimeout: clientTimeout}); err != nil {
		t.Fatal(err)
	}
	if a.desk, err = client.New(client.Options{BaseURL: base, Bearer: deskTok, Attempts: 1, Timeout: clientTimeout, ConnectTimeout: clientTimeout}); err != nil {
		t.Fatal(err)
	}
	r, err := scenario.New(base, fixtures.Manifests())
	if err != nil {
		t.Fatal(err)
	}
	if a.m, err = r.LoadManifest("llama3-8b"); err != nil {
		t.Fatal(err)
	}
	return a
}

// at is the same account talking to another itogate.
func (a *actor) at(t testing.TB, base string) *actor {
	return newActor(t, base, a.account, a.booking)
}

var jtiSeq struct {
	sync.Mutex
	n int
}

func (a *actor) mint(k keys.Key, typ string, claims map[string]any) (string, error) {
	jtiSeq.Lock()
	jtiSeq.n++
	n := jtiSeq.n
	jtiSeq.Unlock()
	if claims["jti"] == nil {
		claims["jti"] = fmt.Sprintf("jti-e2e-%d-%d", time.Now().UnixNano(), n)
	}
	tok, err := token.Mint(k.Private, k.KeyID, k.Algorithm, typ, claims)
	return string(tok), err
}

// entitlement is a fresh entitlement for the actor's booking, matching the
// llama3-8b fixture's hardware; tweak may change claims.
func (a *actor) entitlement(t testing.TB, tweak func(map[string]any)) string {
	t.Helper()
	c := scenario.EntitlementClaims(a.m.Doc, time.Now())
	c["sub"], c["booking_id"] = a.account, a.booking
	if tweak != nil {
		tweak(c)
	}
	tok, err := a.mint(a.keys.Entitlement, config.TypeEntitlement, c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// confirmation mints and deposits a confirmation for act and returns its
// reference. claims override the defaults (a nil value removes one).
func (a *actor) confirmation(t testing.TB, act api.Action, claims map[string]any) string {
	t.Helper()
	ref, err := a.tryConfirmation(context.Background(), act, claims)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func (a *actor) tryConfirmation(ctx context.Context, act api.Action, override map[string]any) (string, error) {
	now := time.Now().Unix()
	c := map[string]any{
		"iss": trust.DevConfirmationIssuer, "aud": trust.DevAudience, "sub": a.account, "act": act,
		"booking_id": a.booking, "cost_usd": "0.00", "iat": now, "exp": now + 600,
	}
	if act == api.TrainCreate {
		c["manifest_digest"], c["cost_usd"] = manifest.Digest(a.m.Raw), "2000.00"
	}
	for k, v := range override {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	tok, err := a.mint(a.keys.Confirmation, config.TypeConfirmation, c)
	if err != nil {
		return "", err
	}
	return a.desk.DepositRef(ctx, tok)
}

// create is a train.create request for the actor's manifest.
func (a *actor) create(ent, ref, key string) api.AdmissionRequest {
	return api.AdmissionRequest{
		Action: api.TrainCreate, BookingID: a.booking, IdempotencyKey: key,
		Manifest: a.m.Raw, ManifestSignature: a.m.Signature, EntitlementToken: ent, ConfirmationRef: ref,
	}
}

// answer is a parsed response, with the raw body for byte comparisons.
type answer struct {
	scenario.Answer
	Body []byte
}

func (r answer) code() api.Code {
	if r.Error == nil {
		return ""
	}
	return r.Error.Code
}

func (r answer) String() string {
	return fmt.Sprintf("%d %s %s", r.Status, r.code(), bytes.TrimSpace(r.Body))
}

func parse(resp client.Response, err error) (answer, error) {
	if err != nil {
		return answer{}, err
	}
	var a answer
	if err := json.Unmarshal(resp.Body, &a.Answer); err != nil {
		return answer{}, fmt.Errorf("HTTP %d: not an envelope: %s", resp.Status, resp.Body)
	}
	a.Status, a.Body = resp.Status, resp.Body
	return a, nil
}

func (a *actor) admit(ctx context.Context, req api.AdmissionRequest) (answer, error) {
	return parse(a.caller.Admit(ctx, req))
}

func (a *actor) status(ctx context.Context, key string) (answer, error) {
	return parse(a.caller.Status(ctx, key))
}

// mustAdmit admits req and fails t unless the answer has status and code
// ("" for an allow).
func (a *actor) mustAdmit(t *testing.T, req api.AdmissionRequest, status int, code api.Code) answer {
	t.Helper()
	r, err := a.admit(context.Background(), req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Action, req.IdempotencyKey, err)
	}
	if r.Status != status || r.code() != code {
		t.Fatalf("%s %s: got %s, want %d %s", req.Action, req.IdempotencyKey, r, status, code)
	}
	return r
}

// --- the itogate binary, as a subprocess ---

var binary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// TestMain removes the binary built by itogateBinary.
func TestMain(m *testing.M) {
	code := m.Run()
	if binary.dir != "" {
		_ = os.RemoveAll(binary.dir)
	}
	os.Exit(code)
}

// itogateBinary builds cmd/itogate once per package run and returns its
// path. The subprocess is built without the race detector (which watches
// this process): on two cores a race-built server under these loads waits
// seconds for the CPU between database round trips and exhausts its pool.
// ITOGATE_E2E_RACE=1 builds it with -race anyway, to hunt races in the
// server under crash and multi-process load on a roomier machine.
func itogateBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		binary.dir, binary.err = os.MkdirTemp("", "itogate-e2e-")
		if binary.err != nil {
			return
		}
		binary.path = filepath.Join(binary.dir, "itogate")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		args := []string{"build", "-o", binary.path}
		if os.Getenv("ITOGATE_E2E_RACE") == "1" {
			args = append(args, "-race")
		}
		cmd := exec.CommandContext(ctx, "go", append(args, "github.com/itocompute/itogate/cmd/itogate")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			binary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

// syncBuffer collects output written concurrently.
type syncBuffer = syncbuf.Buffer

// proc is one `itogate serve` subprocess.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	url  string
	logs *syncBuffer
	done chan struct{}
	err  error
}

// startServe runs `itogate serve` in development mode on a free loopback
// port with extra flags, waits until /readyz answers 200 and stops it (if
// still running) when the test ends.
func startServe(t *testing.T, dataDir string, extra ...string) *proc {
	t.Helper()
	bin := itogateBinary(t)
	addr := freeAddr(t)
	// No evaluation bound: these tests assert exact ledger outcomes under
	// bursts (200 requests at once) larger than the default wait queue, on a
	// shared machine; shedding itself is tested in gatekeeper/server
	// (TestOverload*).
	args := append([]string{"serve", "--listen", addr, "--data-dir", dataDir,
		"--policy-deadline", policyDeadline.String(), "--request-timeout", requestTimeout.String(),
		"--max-concurrent-evaluations", "-1"}, extra...)
	p := &proc{t: t, url: "http://" + addr, logs: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	orphanProof(p.cmd)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if strings.Contains(p.logs.String(), "WARNING: DATA RACE") {
			t.Errorf("the race detector reported a data race in itogate %s", addr)
		}
		if t.Failed() {
			t.Logf("itogate %s output:\n%s", addr, tail(p.logs.String(), 4000))
		}
	})
	deadline := time.Now().Add(patience.Wait)
	for {
		select {
		case <-p.done:
			t.Fatalf("itogate exited before ready: %v\n%s", p.err, p.logs.String())
		default:
		}
		if readyz(p.url) == http.StatusOK {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("itogate not ready after %v:\n%s", patience.Wait, p.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill sends SIGKILL: no shutdown, no deferred Close, mid-write if it was
// writing.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits for a clean exit, killing after 15s.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(patience.Wait):
		p.t.Errorf("itogate did not stop within %v of SIGTERM; killing", patience.Wait)
		p.kill()
	}
}

func readyz(base string) int {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(base + "/readyz")
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// checkLedger runs the store's own invariant check (ledger.Checker) and
// returns its counts.
func checkLedger(t *testing.T, store ledger.Store) ledger.CheckReport {
	t.Helper()
	c, ok := store.(ledger.Checker)
	if !ok {
		t.Fatalf("%T does not implement ledger.Checker", store)
	}
	rep, err := c.Check(context.Background())
	if err != nil {
		t.Fatalf("ledger check: %v (%+v)", err, rep)
	}
	return rep
}
