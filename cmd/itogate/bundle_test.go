package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/internal/syncbuf"
	"github.com/itocompute/itogate/policies"
)

// frozen is the repository's policy with a decision that denies everything
// with BUNDLE_FROZEN: a revision whose decisions are told apart from the
// real policy's at a glance.
const frozen = `package ito.admission

decision := {"allow": false, "violations": [{"code": "BUNDLE_FROZEN", "gate": "admission", "message": "frozen test bundle"}]}
`

// signedPolicies signs the repository's policies (or the frozen variant)
// with the development bundle key, built at at.
func signedPolicies(t testing.TB, at time.Time, label string, isFrozen bool) []byte {
	t.Helper()
	files := bundletest.FromFS(t, policies.Bundle())
	if isFrozen {
		files["ito/admission/admission.rego"] = frozen
	}
	dev := bundletest.DevSigner()
	return bundletest.Build(t, bundletest.Spec{Files: files,
		Manifest: bundletest.Manifest(bundletest.Revision(at, label), at)}, &dev)
}

// bundleHost serves one bundle with ETags and 304s.
type bundleHost struct {
	mu   sync.Mutex
	body []byte
	hits atomic.Int64
	// served holds the digest of every body sent in full (not 304s).
	served map[string]bool
}

func (h *bundleHost) publish(b []byte) { h.mu.Lock(); h.body = b; h.mu.Unlock() }

func (h *bundleHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	body := h.body
	h.mu.Unlock()
	h.hits.Add(1)
	etag := `"` + bundle.Digest(body)[7:] + `"`
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("ETag", etag)
	if _, err := w.Write(body); err == nil {
		h.mu.Lock()
		if h.served == nil {
			h.served = map[string]bool{}
		}
		h.served[bundle.Digest(body)] = true
		h.mu.Unlock()
	}
}

// downloaded reports whether b was sent in full at least once.
func (h *bundleHost) downloaded(b []byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.served[bundle.Digest(b)]
}

// startServe runs serve in development mode with o and waits for /readyz
// (or, with wantReady false, for the listener).
func startServe(t *testing.T, o *serveOptions, wantReady bool) (url string, logs *syncBuffer) {
	t.Helper()
	o.listen = freeAddr(t)
	o.dataDir = t.TempDir()
	// The race detector slows the real policy down tenfold and CI machines
	// are shared; the tests are about bundles, not the evaluation deadline.
	o.policyDeadline = patience.Deadline
	// No evaluation bound: a request queued past the 1 s wait on a loaded
	// machine would be shed; shedding is tested in gatekeeper/server.
	if o.maxEvaluations == 0 {
		o.maxEvaluations = -1
	}
	logs = &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runServe(ctx, o, slog.New(slog.NewJSONHandler(logs, nil))) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	url = "http://" + o.listen
	// Under -race on a loaded machine verifying and compiling the real
	// policy takes seconds.
	patience.Until(t, "serve ready", func() bool {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200 || !wantReady
	})
	return url, logs
}

// syncBuffer collects output written concurrently.
type syncBuffer = syncbuf.Buffer

func get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// admitLlama posts one fresh train.create for the llama3-8b fixture and
// returns the status, the code (or "" on allow) and the bundle revision.
// Its booking holds as many runs as a load can admit (EntitlementForRuns):
// how many are admitted before the swaps end depends on the machine's
// speed, so neither the booking's GPUs nor its checkpoint quota may be
// what refuses one.
func admitLlama(ctx context.Context, r *scenario.Runner, m scenario.Manifest, key string) (int, string, string, error) {
	ent, err := r.EntitlementForRuns(m, "", 1<<16)
	if err != nil {
		return 0, "", "", err
	}
	cost, _ := m.Doc["budget"].(map[string]any)["ceiling_usd"].(string)
	ref, err := r.Confirm(ctx, "train.create", manifest.Digest(m.Raw), cost, "")
	if err != nil {
		return 0, "", "", err
	}
	status, body := r.Raw(ctx, api.AdmissionRequest{
		Action: "train.create", BookingID: scenario.Booking, IdempotencyKey: key,
		Manifest: m.Raw, ManifestSignature: m.Signature, EntitlementToken: ent, ConfirmationRef: ref,
	})
	var env struct {
		Data *struct {
			BundleRevision string `json:"bundle_revision"`
		} `json:"data"`
		Error *struct {
			Code           string `json:"code"`
			BundleRevision string `json:"bundle_revision"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &env); err != nil {
		return status, "", "", fmt.Errorf("HTTP %d: %s", status, body)
	}
	switch {
	case env.Error != nil:
		rev := env.Error.BundleRevision
		if rev == "" && env.Data != nil {
			rev = env.Data.BundleRevision
		}
		return status, env.Error.Code, rev, nil
	case env.Data != nil:
		return status, "", env.Data.BundleRevision, nil
	}
	return status, "", "", fmt.Errorf("HTTP %d: %s", status, body)
}

// A development server enforcing signed bundles from a real bundle server:
// the demo passes against the signed policies; then, under concurrent
// admissions, newer revisions alternate between the real policy and a
// frozen one, with tampered bundles in between. Every admission is answered
// by exactly one revision (an allow only by a real one, BUNDLE_FROZEN only
// by a frozen one), none fails, and no tampered bundle is ever enforced.
func TestServeSignedBundleHotSwap(t *testing.T) {
	base := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	host := &bundleHost{}
	host.publish(signedPolicies(t, base, "r1", false))
	bs := httptest.NewServer(host)
	defer bs.Close()
	url, logs := startServe(t, &serveOptions{bundleURL: bs.URL, bundlePoll: 20 * time.Millisecond}, true)

	code, metrics := get(t, url+"/metrics")
	for _, want := range []string{
		`itogate_bundle_activations_total{reason="",result="success"} 1`,
		`itogate_policy_bundle_info{digest="sha256:`,
		`revision="` + bundletest.Revision(base, "r1") + `"`,
		"itogate_bundle_age_seconds 3",
	} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Fatalf("metrics lack %q:\n%s", want, grepLines(metrics, "bundle"))
		}
	}

	var out bytes.Buffer
	if err := runDemo(context.Background(), &out, url); err != nil {
		t.Fatalf("demo against the signed bundle: %v\n%s", err, out.String())
	}

	// Under load. Each revision comes with a tampered copy that would allow
	// everything: it must never be enforced.
	builds := map[int][2][]byte{}
	for i := 2; i <= 5; i++ {
		next := signedPolicies(t, base.Add(time.Duration(i)*time.Minute), fmt.Sprintf("r%d", i), i%2 == 0)
		builds[i] = [2][]byte{next, bundletest.Rewrite(t, next, func(f map[string][]byte) {
			f["/ito/admission/admission.rego"] = []byte("package ito.admission\n\ndecision := {\"allow\": true, \"violations\": []}\n")
		})}
	}
	load := newSwapLoad(bundletest.Revision(base, "r1"))
	load.start(t, url, 3)
	for i := 2; i <= 5; i++ {
		rev, isFrozen := bundletest.Revision(base.Add(time.Duration(i)*time.Minute), fmt.Sprintf("r%d", i)), i%2 == 0
		next, tampered := builds[i][0], builds[i][1]
		// Wait until the poller has downloaded the tampered copy (a fixed
		// sleep is too short on a loaded machine, and then no tampered bundle
		// is ever refused).
		host.publish(tampered)
		patience.Until(t, fmt.Sprintf("tampered r%d downloaded", i), func() bool { return host.downloaded(tampered) })
		load.expect(rev, isFrozen)
		host.publish(next)
		patience.Until(t, fmt.Sprintf("an admission answered by r%d", i), func() bool { return load.answeredBy(rev) })
	}
	seen, failures := load.finish()
	for _, f := range failures[:min(len(failures), 10)] {
		t.Error(f)
	}
	if len(seen) != 5 {
		t.Errorf("admissions saw revisions %v", seen)
	}
	_, metrics = get(t, url+"/metrics")
	if !strings.Contains(metrics, `itogate_bundle_activations_total{reason="",result="success"} 5`) ||
		!strings.Contains(metrics, `itogate_bundle_activations_total{reason="signature",result="failure"}`) {
		t.Errorf("activation metrics:\n%s", grepLines(metrics, "activations"))
	}
	if !strings.Contains(logs.String(), "policy bundle not activated") {
		t.Error("no log line for the refused bundles")
	}
	t.Logf("admissions by revision: %v", seen)
}

// swapLoad is concurrent admissions of llama3-8b during bundle swaps,
// checking each answer against the revision that gave it: an allow only
// from a real revision, BUNDLE_FROZEN only from a frozen one, nothing from
// a revision not yet expected.
type swapLoad struct {
	stop     atomic.Bool
	wg       sync.WaitGroup
	mu       sync.Mutex
	frozen   map[string]bool // revision → frozen
	seen     map[string]int  // revision → admissions it answered
	failures []string
}

func newSwapLoad(first string) *swapLoad {
	return &swapLoad{frozen: map[string]bool{first: false}, seen: map[string]int{}}
}

// start runs workers admitting in a loop until finish.
func (l *swapLoad) start(t *testing.T, url string, workers int) {
	t.Helper()
	for w := range workers {
		r, m := scenarioFor(t, url, "llama3-8b")
		l.wg.Go(func() {
			for i := 0; !l.stop.Load(); i++ {
				status, code, rev, err := admitLlama(context.Background(), r, m, fmt.Sprintf("swap-%d-%d", w, i))
				l.record(status, code, rev, err)
			}
		})
	}
}

func (l *swapLoad) record(status int, code, rev string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	isFrozen, known := l.frozen[rev]
	switch {
	case err != nil:
		l.failures = append(l.failures, err.Error())
	case !known:
		l.failures = append(l.failures, fmt.Sprintf("HTTP %d %s from unknown revision %q", status, code, rev))
	case isFrozen && (status != 403 || code != "BUNDLE_FROZEN"):
		l.failures = append(l.failures, fmt.Sprintf("frozen revision %s answered %d %q", rev, status, code))
	case !isFrozen && (status != 200 || code != ""):
		l.failures = append(l.failures, fmt.Sprintf("real revision %s answered %d %q", rev, status, code))
	}
	l.seen[rev]++
}

// expect makes rev a known revision, frozen or real.
func (l *swapLoad) expect(rev string, frozen bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.frozen[rev] = frozen
}

func (l *swapLoad) answeredBy(rev string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[rev] > 0
}

// finish stops the workers and returns what they saw.
func (l *swapLoad) finish() (seen map[string]int, failures []string) {
	l.stop.Store(true)
	l.wg.Wait()
	return l.seen, l.failures
}

// A bundle past its max age stops being enforced: /readyz fails and
// admissions are 503 POLICY_BUNDLE_STALE; with no good bundle at all the
// service is not ready and answers POLICY_NOT_READY.
func TestServeStaleAndMissingBundle(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bundle.tar.gz")
	const maxAge = time.Hour
	// Fresh when the server starts; then the server's bundle clock moves
	// past the max age (no waiting, whatever the machine's speed). Fresh
	// admissions are covered by the hot-swap test.
	builtAt := time.Now().UTC().Truncate(time.Second).Add(-maxAge / 2)
	if err := os.WriteFile(path, signedPolicies(t, builtAt, "soon-stale", false), 0o600); err != nil {
		t.Fatal(err)
	}
	var ahead atomic.Int64 // how far the bundle clock runs ahead, in ns
	clock := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	url, _ := startServe(t, &serveOptions{bundleFile: path, bundleMaxAge: maxAge, bundleClock: clock}, true)
	r, err := scenario.New(url, fixtures.Manifests())
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.LoadManifest("llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	ahead.Store(int64(maxAge))
	if status, body := get(t, url+"/readyz"); status != 503 || !strings.Contains(body, "stale") {
		t.Fatalf("readyz with the bundle past its max age: %d %s", status, body)
	}
	status, code, rev, err := admitLlama(context.Background(), r, m, "stale-1")
	if err != nil || status != 503 || code != "POLICY_BUNDLE_STALE" || !strings.HasSuffix(rev, "-soon-stale") {
		t.Fatalf("stale bundle: %d %q %q %v", status, code, rev, err)
	}

	// No bundle at all (the file is missing): not ready, POLICY_NOT_READY.
	url2, logs := startServe(t, &serveOptions{bundleFile: filepath.Join(dir, "missing.tar.gz")}, false)
	if status, _ := get(t, url2+"/readyz"); status != 503 {
		t.Fatalf("readyz without a bundle: %d", status)
	}
	r2, err := scenario.New(url2, fixtures.Manifests())
	if err != nil {
		t.Fatal(err)
	}
	if status, code, _, err := admitLlama(context.Background(), r2, m, "none-1"); err != nil || status != 503 || code != "POLICY_NOT_READY" {
		t.Fatalf("no bundle: %d %q %v\n%s", status, code, err, logs.String())
	}
	// An unsigned bundle never becomes active either.
	unsigned := filepath.Join(dir, "unsigned.tar.gz")
	files := bundletest.FromFS(t, policies.Bundle())
	if err := os.WriteFile(unsigned, bundletest.Build(t, bundletest.Spec{Files: files}, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	url3, logs3 := startServe(t, &serveOptions{bundleFile: unsigned}, false)
	if status, _ := get(t, url3+"/readyz"); status != 503 || !strings.Contains(logs3.String(), `"reason":"unsigned"`) {
		t.Fatalf("unsigned bundle: readyz %d\n%s", status, logs3.String())
	}
}

// A production configuration refuses the development bundle key and
// enforces a bundle signed with its own key, from a bundle server.
func TestServeConfigBundleKeys(t *testing.T) {
	dir := t.TempDir()
	signer := bundletest.NewSigner("release-2026-11")
	pub := filepath.Join(dir, "bundle.pub.pem")
	if err := os.WriteFile(pub, signer.Key.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	devPub := filepath.Join(dir, "dev-bundle.pub.pem")
	if err := os.WriteFile(devPub, bundle.DevKey().PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC().Truncate(time.Second).Add(-time.Minute)
	archive := filepath.Join(dir, "bundle.tar.gz")
	if err := os.WriteFile(archive, bundletest.Build(t, bundletest.Spec{Files: bundletest.FromFS(t, policies.Bundle()),
		Manifest: bundletest.Manifest(bundletest.Revision(at, "prod"), at)}, &signer), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := writeProductionConfig(t, dir, fmt.Sprintf(`
  bundle:
    file: bundle.tar.gz
    max_age: 720h
    verification_keys:
      - {key_id: dev-bundle-1, algorithm: RS256, pem_file: %s}
`, devPub))
	err := runServe(context.Background(), &serveOptions{configFile: cfgFile}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "development key") {
		t.Fatalf("dev bundle key in production: %v", err)
	}

	raw, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	host := &bundleHost{}
	host.publish(raw)
	bs := httptest.NewServer(host)
	defer bs.Close()
	cfgFile = writeProductionConfig(t, dir, fmt.Sprintf(`
  bundle:
    url: %s/itogate/bundle.tar.gz
    max_age: 720h
    poll_interval: 1s
    verification_keys:
      - {key_id: release-2026-11, algorithm: ES256, pem_file: %s}
`, bs.URL, pub))
	addr := productionListen(t, cfgFile)
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, &serveOptions{configFile: cfgFile}, slog.New(slog.NewJSONHandler(logs, nil)))
	}()
	defer func() { cancel(); <-done }()
	patience.Until(t, "production serve ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	status, body := get(t, "http://"+addr+"/metrics")
	if status != 200 || !strings.Contains(body, `revision="`+bundletest.Revision(at, "prod")+`"`) {
		t.Fatalf("production bundle not active:\n%s\n%s", grepLines(body, "bundle"), logs.String())
	}
	if !strings.Contains(logs.String(), `"key_id":"release-2026-11"`) {
		t.Fatalf("activation log: %s", logs.String())
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// writeProductionConfig writes itogate.yaml with fresh (non-development)
// trust keys, one per purpose, listening on a free loopback port, and the
// given policy section lines appended under "policy:".
func writeProductionConfig(t *testing.T, dir, policy string) string {
	t.Helper()
	for _, name := range []string{"callers", "depositors", "entitlement", "confirmation", "manifest"} {
		s := bundletest.NewSigner(name)
		if err := os.WriteFile(filepath.Join(dir, name+".pub.pem"), s.Key.PEM, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fmt.Sprintf(`listen: %s
data_dir: data
trust:
  callers:      {issuer: https://idp.example.com, audience: itogate, pem_file: callers.pub.pem, key_id: c1, algorithm: ES256}
  depositors:   {issuer: https://desk.example.com/d, audience: itogate-deposit, pem_file: depositors.pub.pem, key_id: d1, algorithm: ES256}
  entitlement:  {issuer: https://backend.example.com, audience: itogate, type: ito-entitlement+jwt,
                 pem_file: entitlement.pub.pem, key_id: e1, algorithm: ES256}
  confirmation: {issuer: https://desk.example.com, audience: itogate, type: ito-confirmation+jwt,
                 pem_file: confirmation.pub.pem, key_id: k1, algorithm: ES256}
  manifest_signers:
    - {key_id: ci, pem_file: manifest.pub.pem}
policy:
  deadline: 30s
%s`, freeAddr(t), policy)
	path := filepath.Join(dir, "itogate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// productionListen reads back the listen address of a config file.
func productionListen(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	return strings.TrimSpace(strings.TrimPrefix(first, "listen:"))
}

// TestServeShadowBundle: a signed candidate bundle that denies everything
// runs beside the enforced one; the allow stands and the disagreement is
// counted and logged.
func TestServeShadowBundle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "candidate.tar.gz")
	if err := os.WriteFile(path, signedPolicies(t, time.Now().Add(-time.Minute), "candidate", true), 0o600); err != nil {
		t.Fatal(err)
	}
	url, logs := startServe(t, &serveOptions{shadowFile: path}, true)
	r, err := scenario.New(url, fixtures.Manifests())
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.LoadManifest("llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := r.Create(context.Background(), m, "shadow-1")
	if err != nil || a.Status != 200 {
		t.Fatalf("enforced answer %d %v %v", a.Status, a.Codes(), err)
	}
	want := `itogate_shadow_decisions_total{kind="allow_to_deny"} 1`
	patience.Until(t, "shadow disagreement counted", func() bool {
		_, body := get(t, url+"/metrics")
		return strings.Contains(body, want)
	})
	if !strings.Contains(logs.String(), "shadow bundle disagrees") {
		t.Fatalf("disagreement not logged: %s", logs.String())
	}
}

// scenarioFor returns a scenario runner against the server at url and the
// fixture manifest name, failing the test if either cannot be had.
func scenarioFor(t *testing.T, url, name string) (*scenario.Runner, scenario.Manifest) {
	t.Helper()
	r, err := scenario.New(url, fixtures.Manifests())
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.LoadManifest(name)
	if err != nil {
		t.Fatal(err)
	}
	return r, m
}
