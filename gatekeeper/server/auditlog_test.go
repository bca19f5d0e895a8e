package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/runtime"
	"github.com/itocompute/itogate/gatekeeper/runtime/runtimetest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
)

// fullDisk stands between the decision log and its real file: while full,
// every Write and Sync fails with ENOSPC, as on a full disk.
type fullDisk struct {
	mu   sync.Mutex
	full bool
	w    io.Writer
	sync func() error
}

func (d *fullDisk) Write(p []byte) (int, error) {
	if d.isFull() {
		return 0, syscall.ENOSPC
	}
	return d.w.Write(p)
}

func (d *fullDisk) Sync() error {
	if d.isFull() {
		return syscall.ENOSPC
	}
	return d.sync()
}

func (d *fullDisk) isFull() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.full
}

func (d *fullDisk) setFull(full bool) {
	d.mu.Lock()
	d.full = full
	d.mu.Unlock()
}

// TestFullDecisionLogRefusesAllows is docs/security.md's guarantee "no
// allow without its audit line", over HTTP on the runtime's own wiring (the
// decision log file, its fsync, readiness, the server log, /metrics), with
// production's rule (a required log) on a development runtime: while the
// disk under the decision log is full, allows are refused with 503
// DECISION_LOG_UNAVAILABLE and nothing is committed, /readyz is not ready,
// and the server log says so once; when space returns, readiness and
// admissions come back, and the log records the gap.
func TestFullDecisionLogRefusesAllows(t *testing.T) {
	logs := &syncBuffer{}
	disk := &fullDisk{}
	rt := runtimetest.Open(t, runtimetest.Config(t), runtime.Options{
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		DecisionLog: func(w io.Writer, o *decisionlog.Options) io.Writer {
			o.Required = true
			disk.w, disk.sync = w, o.Sync
			o.Sync = disk.Sync
			return disk
		},
	})
	h := serveHarness(t, rt, logs)
	ctx := context.Background()
	readyz := func() int {
		t.Helper()
		resp, err := http.Get(h.srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	count := func(msg string) int { return strings.Count(logs.String(), `"msg":"`+msg) }
	const failing = "decision log cannot be written"
	const recovered = "decision log writable again"

	if got := readyz(); got != 200 {
		t.Fatalf("readyz %d before the disk is full", got)
	}
	// Every drop reason's series exists before the first drop.
	body := h.metricsText(t)
	for _, r := range decisionlog.DropReasons {
		if !strings.Contains(body, `itogate_decision_log_dropped_total{reason="`+r+`"} 0`) {
			t.Errorf("no itogate_decision_log_dropped_total{reason=%q} 0 at start", r)
		}
	}
	if !strings.Contains(body, "itogate_decision_log_writable 1") {
		t.Error("itogate_decision_log_writable is not 1 at start")
	}

	m, err := h.runner.LoadManifest("llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	ent, err := h.runner.EntitlementFor(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []api.AdmissionRequest
	for _, key := range []string{"k-full-1", "k-full-2", "k-full-3"} {
		ref, err := h.runner.Confirm(ctx, "train.create", manifest.Digest(m.Raw), "2000.00", "")
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, api.AdmissionRequest{Action: "train.create", BookingID: scenario.Booking,
			IdempotencyKey: key, Manifest: m.Raw, ManifestSignature: m.Signature, EntitlementToken: ent, ConfirmationRef: ref})
	}

	disk.setFull(true)
	for _, req := range reqs {
		a, err := h.runner.Admit(ctx, req)
		if err != nil || a.Status != 503 || a.Error == nil || a.Error.Code != api.CodeDecisionLogUnavailable {
			t.Fatalf("admission on a full disk: %+v %v", a, err)
		}
		c, err := h.store.Confirmation(ctx, req.ConfirmationRef)
		if err != nil || c.State != ledger.ConfirmationAvailable {
			t.Errorf("confirmation after the refusal: %+v %v", c, err)
		}
		if _, err := h.store.Admission(ctx, scenario.Account, req.IdempotencyKey); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("admission under %s: %v", req.IdempotencyKey, err)
		}
	}
	for range 2 {
		if got := readyz(); got != 503 {
			t.Fatalf("readyz %d on a full disk", got)
		}
	}
	// The probe behind readyz was answered after the denies' own lines,
	// all lost.
	body = h.metricsText(t)
	for _, want := range []string{`itogate_decision_log_dropped_total{reason="write"} 3`, "itogate_decision_log_writable 0"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics without %s", want)
		}
	}
	if got := count(failing); got != 1 {
		t.Errorf("%d server log lines %q for one failure, want 1:\n%s", got, failing, logs.String())
	}

	disk.setFull(false)
	if got := readyz(); got != 200 {
		t.Fatalf("readyz %d after space returned", got)
	}
	if count(failing) != 1 || count(recovered) != 1 {
		t.Errorf("server log: %d %q, %d %q; want one each", count(failing), failing, count(recovered), recovered)
	}
	a, err := h.runner.Admit(ctx, reqs[0])
	if err != nil || a.Status != 200 || a.Data.Decision != "allow" {
		t.Fatalf("admission after space returned: %+v %v", a, err)
	}
	if !strings.Contains(h.metricsText(t), "itogate_decision_log_writable 1") {
		t.Error("itogate_decision_log_writable is not 1 again")
	}

	h.dl.Close()
	f, err := os.Open(string(h.dlog))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines, err := decisionlog.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	var phases []string
	for _, l := range lines {
		phases = append(phases, l.Phase+":"+l.Result)
	}
	if got := strings.Join(phases, ","); got != "gap:,intent:allow,:allow" || lines[0].GapLost != 3 ||
		lines[1].DecisionID != a.Data.DecisionID || lines[2].DecisionID != a.Data.DecisionID {
		t.Errorf("decision log %s (gap lost %d), want the gap (3 lost) and the allow's two lines", got, lines[0].GapLost)
	}
}

// TestFullDecisionLogInDevelopment: development mode keeps the best-effort
// log: on a full disk the allow is committed, its line dropped and counted
// (write), /readyz stays ready, and the server log says once that lines are
// dropped.
func TestFullDecisionLogInDevelopment(t *testing.T) {
	logs := &syncBuffer{}
	disk := &fullDisk{}
	rt := runtimetest.Open(t, runtimetest.Config(t), runtime.Options{
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		DecisionLog: func(w io.Writer, o *decisionlog.Options) io.Writer {
			disk.w, disk.sync = w, o.Sync
			o.Sync = disk.Sync
			return disk
		},
	})
	h := serveHarness(t, rt, logs)
	if h.dl.Required() {
		t.Fatal("a development runtime requires its decision log")
	}
	disk.setFull(true)
	m, _ := h.runner.LoadManifest("llama3-8b")
	for _, key := range []string{"k-dev-1", "k-dev-2"} {
		a, _, err := h.runner.Create(context.Background(), m, key)
		if err != nil || a.Status != 200 || a.Data.Decision != "allow" {
			t.Fatalf("development allow on a full disk: %+v %v", a, err)
		}
	}
	if err := h.dl.Probe(context.Background()); err == nil { // after the allows' lines
		t.Fatal("probe of a full disk succeeded")
	}
	resp, err := http.Get(h.srv.URL + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz in development on a full disk: %v %v", resp, err)
	}
	resp.Body.Close()
	if !strings.Contains(h.metricsText(t), `itogate_decision_log_dropped_total{reason="write"} 2`) {
		t.Error("the allows' lines are not counted as dropped (write)")
	}
	msg := `"msg":"decision log cannot be written: its lines are dropped (development mode: allows are committed anyway)"`
	if got := strings.Count(logs.String(), msg); got != 1 {
		t.Errorf("%d server log lines %s, want 1:\n%s", got, msg, logs.String())
	}
}
