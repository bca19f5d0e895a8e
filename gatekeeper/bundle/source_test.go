package bundle_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/internal/patience"
)

// bundleServer serves one archive with the OPA bundle protocol: a strong
// ETag (the archive's digest), 304 on a matching If-None-Match.
type bundleServer struct {
	*httptest.Server
	mu              sync.Mutex
	body            []byte
	status          int // when not 0, answer this instead
	ok, notModified atomic.Int64
	lastIfNoneMatch atomic.Value
}

func newBundleServer(t testing.TB, body []byte) *bundleServer {
	s := &bundleServer{body: body}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		body, status := s.body, s.status
		s.mu.Unlock()
		inm := r.Header.Get("If-None-Match")
		s.lastIfNoneMatch.Store(inm)
		if status != 0 {
			w.WriteHeader(status)
			return
		}
		etag := `"` + strings.TrimPrefix(bundle.Digest(body), "sha256:") + `"`
		if inm == etag {
			s.notModified.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		s.ok.Add(1)
		w.Header().Set("ETag", etag)
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *bundleServer) publish(body []byte) { s.mu.Lock(); s.body = body; s.mu.Unlock() }
func (s *bundleServer) fail(status int)     { s.mu.Lock(); s.status = status; s.mu.Unlock() }

func httpSource(t testing.TB, url string, opts bundle.VerifierOptions, timeout time.Duration) *bundle.HTTP {
	t.Helper()
	h, err := bundle.NewHTTP(bundle.HTTPOptions{URL: url, Verifier: verifier(t, opts), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func build(t testing.TB, at time.Time, label string, codes ...string) []byte {
	return bundletest.Build(t, bundletest.Spec{Files: bundletest.Decision(codes...),
		Manifest: bundletest.Manifest(bundletest.Revision(at, label), at)}, &signerA)
}

func TestHTTPSourceETags(t *testing.T) {
	t.Parallel()
	v1 := build(t, built, "v1")
	srv := newBundleServer(t, v1)
	src := httpSource(t, srv.URL+"/bundles/itogate.tar.gz?token=secret", bundle.VerifierOptions{}, 0)
	if strings.Contains(src.String(), "secret") {
		t.Fatalf("String leaks the query: %s", src)
	}
	ctx := context.Background()

	b, err := src.Fetch(ctx)
	if err != nil || b == nil || !strings.HasSuffix(b.Revision, "-v1") || b.Digest != bundle.Digest(v1) {
		t.Fatalf("first fetch: %+v %v", b, err)
	}
	if b.Origin != srv.URL+"/bundles/itogate.tar.gz?…" {
		t.Fatalf("origin %q", b.Origin)
	}
	// Unchanged: 304, nothing to do.
	b, err = src.Fetch(ctx)
	if err != nil || b != nil || srv.notModified.Load() != 1 {
		t.Fatalf("second fetch: %+v %v (304s: %d)", b, err, srv.notModified.Load())
	}
	if got := srv.lastIfNoneMatch.Load().(string); !strings.Contains(got, strings.TrimPrefix(bundle.Digest(v1), "sha256:")) {
		t.Fatalf("If-None-Match %q", got)
	}
	// A new bundle: 200.
	v2 := build(t, built.Add(time.Minute), "v2")
	srv.publish(v2)
	if b, err = src.Fetch(ctx); err != nil || b == nil || !strings.HasSuffix(b.Revision, "-v2") {
		t.Fatalf("third fetch: %+v %v", b, err)
	}
	// Server errors are fetch failures.
	srv.fail(http.StatusInternalServerError)
	if _, err = src.Fetch(ctx); reasonOf(err) != bundle.ReasonFetch {
		t.Fatalf("500: %v", err)
	}
	// A tampered bundle is refused, and refused again on the next poll (no
	// ETag is remembered for it).
	srv.fail(0)
	srv.publish(bundletest.Rewrite(t, build(t, built.Add(2*time.Minute), "v3"), func(f map[string][]byte) {
		f["/ito/admission/admission.rego"] = append(f["/ito/admission/admission.rego"], []byte("\nx := 1\n")...)
	}))
	for range 2 {
		if _, err = src.Fetch(ctx); reasonOf(err) != bundle.ReasonSignature {
			t.Fatalf("tampered: %v", err)
		}
	}
}

func TestHTTPSourceLimits(t *testing.T) {
	t.Parallel()
	raw := build(t, built, "v1")
	srv := newBundleServer(t, raw)
	if _, err := httpSource(t, srv.URL, bundle.VerifierOptions{MaxBytes: 100}, 0).Fetch(context.Background()); reasonOf(err) != bundle.ReasonTooLarge {
		t.Fatalf("size limit: %v", err)
	}
	// A server without Content-Length that never stops.
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/gzip")
		for i := 0; i < 1<<12 && r.Context().Err() == nil; i++ {
			_, _ = w.Write(bytes.Repeat([]byte{0}, 1<<10))
			w.(http.Flusher).Flush()
		}
	}))
	defer endless.Close()
	if _, err := httpSource(t, endless.URL, bundle.VerifierOptions{MaxBytes: 64 << 10}, 0).Fetch(context.Background()); reasonOf(err) != bundle.ReasonTooLarge {
		t.Fatalf("streamed size limit: %v", err)
	}
	// A server that stalls: the overall timeout ends the request.
	stall := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(stall)
	start := time.Now()
	if _, err := httpSource(t, slow.URL, bundle.VerifierOptions{}, 200*time.Millisecond).Fetch(context.Background()); reasonOf(err) != bundle.ReasonFetch {
		t.Fatalf("timeout: %v", err)
	}
	if d := time.Since(start); d > patience.Wait { // unbounded, it waits for the stall to end
		t.Fatalf("timeout took %s", d)
	}
}

func TestNewHTTPRefusesBadURLs(t *testing.T) {
	t.Parallel()
	v := verifier(t, bundle.VerifierOptions{})
	for _, u := range []string{"", "ftp://x/b.tar.gz", "file:///etc/passwd", "https://user:pw@host/b", "https:///b", "://"} {
		if _, err := bundle.NewHTTP(bundle.HTTPOptions{URL: u, Verifier: v}); err == nil {
			t.Errorf("%q accepted", u)
		}
	}
	if _, err := bundle.NewHTTP(bundle.HTTPOptions{URL: "https://x/b"}); err == nil {
		t.Error("no verifier accepted")
	}
}

func TestFileSource(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "bundle.tar.gz")
	src := bundle.NewFile(path, verifier(t, bundle.VerifierOptions{}))
	ctx := context.Background()
	if _, err := src.Fetch(ctx); reasonOf(err) != bundle.ReasonFetch {
		t.Fatalf("missing file: %v", err)
	}
	write := func(raw []byte) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(build(t, built, "v1"))
	if b, err := src.Fetch(ctx); err != nil || b == nil || b.Origin != path {
		t.Fatalf("fetch: %+v %v", b, err)
	}
	if b, err := src.Fetch(ctx); err != nil || b != nil {
		t.Fatalf("unchanged: %+v %v", b, err)
	}
	write(build(t, built.Add(time.Minute), "v2"))
	if b, err := src.Fetch(ctx); err != nil || b == nil || !strings.HasSuffix(b.Revision, "-v2") {
		t.Fatalf("changed: %+v %v", b, err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := bundle.NewFile(filepath.Join(dir, "d"), verifier(t, bundle.VerifierOptions{})).Fetch(ctx); reasonOf(err) != bundle.ReasonFetch {
		t.Fatalf("directory: %v", err)
	}
}

// Hot swap under load: a real bundle server publishes newer revisions (and,
// in between, tampered ones) while workers decide continuously. Revision i
// allows when i is odd and denies with REV_i when i is even, so a decision
// that mixed two bundles, or a tampered bundle that got through, shows as a
// decision disagreeing with its own revision. No decision may fail.
func TestHotSwapUnderLoad(t *testing.T) {
	t.Parallel()
	const revisions = 12
	bundleFor := func(i int) []byte {
		var codes []string
		if i%2 == 0 {
			codes = []string{fmt.Sprintf("REV_%d", i)}
		}
		return build(t, built.Add(time.Duration(i)*time.Second), fmt.Sprintf("r%d", i), codes...)
	}
	srv := newBundleServer(t, bundleFor(1))
	o := &observer{}
	m, err := bundle.NewManager(bundle.Options{
		Source:       httpSource(t, srv.URL, bundle.VerifierOptions{}, 0),
		PollInterval: 2 * time.Millisecond,
		Now:          func() time.Time { return built.Add(time.Hour) },
		Observer:     o,
		// Under -race and a loaded machine a starved goroutine can exceed
		// the 250ms default; the test is about swaps, not the deadline.
		Deadline: patience.Deadline,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Load(ctx); err != nil {
		t.Fatal(err)
	}
	go m.Run(ctx)

	var (
		stop      atomic.Bool
		decisions atomic.Int64
		mu        sync.Mutex
		seen      = map[int]int{}
		failures  []string
	)
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				d := m.Active()
				if d == nil {
					report("no active decider after the first activation")
					return
				}
				dec, err := d.Decide(ctx, factsFor(d, map[string]any{}))
				if err != nil {
					report("decision failed: %v", err)
					continue
				}
				i, err := strconv.Atoi(dec.BundleRevision[strings.LastIndex(dec.BundleRevision, "-r")+2:])
				if err != nil || dec.BundleRevision != d.Revision() {
					report("revision %q (decider %q)", dec.BundleRevision, d.Revision())
					continue
				}
				wantAllow := i%2 == 1
				if dec.Allow != wantAllow || (!wantAllow && (len(dec.Violations) != 1 || string(dec.Violations[0].Code) != fmt.Sprintf("REV_%d", i))) {
					report("revision r%d decided allow=%v %v: a mix or a tampered bundle", i, dec.Allow, dec.Violations)
				}
				decisions.Add(1)
				mu.Lock()
				seen[i]++
				mu.Unlock()
			}
		})
	}
	waitFor := func(i int) {
		deadline := time.Now().Add(patience.Wait)
		for time.Now().Before(deadline) {
			if info, _ := m.Info(); strings.HasSuffix(info.Revision, fmt.Sprintf("-r%d", i)) {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Errorf("revision r%d never activated", i)
	}
	swaps := make([]time.Duration, 0, revisions)
	for i := 2; i <= revisions; i++ {
		// A tampered copy of the next revision that would flip its
		// decision: it must never be activated.
		tampered := bundletest.Rewrite(t, bundleFor(i), func(f map[string][]byte) {
			f["/ito/admission/admission.rego"] = []byte("package ito.admission\n\ndecision := {\"allow\": true, \"violations\": []}\n")
		})
		served := srv.ok.Load()
		srv.publish(tampered)
		// Wait until the poller has downloaded it (a fixed sleep was too
		// short on a loaded machine, and then no tampered bundle was seen).
		for deadline := time.Now().Add(patience.Wait); srv.ok.Load() == served; {
			if time.Now().After(deadline) {
				t.Fatalf("the tampered r%d was never downloaded", i)
			}
			time.Sleep(time.Millisecond)
		}
		start := time.Now()
		srv.publish(bundleFor(i))
		waitFor(i)
		swaps = append(swaps, time.Since(start))
		time.Sleep(5 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	cancel()

	for _, f := range failures {
		t.Error(f)
	}
	if len(seen) < revisions/2 {
		t.Errorf("decisions saw only revisions %v", seen)
	}
	if o.count("success/") != revisions || o.count("failure/signature") == 0 {
		t.Errorf("activations %v", o.activations)
	}
	t.Logf("%d decisions over %d revisions %v; publish-to-active %v", decisions.Load(), len(seen), seen, swaps)
}

// The stale decision is a coded deny, never an allow, and says so.
func TestStaleDecisionCode(t *testing.T) {
	t.Parallel()
	now := built
	m, err := bundle.NewManager(bundle.Options{Deadline: patience.Deadline,
		Source: httpSource(t, newBundleServer(t, build(t, built, "v1")).URL, bundle.VerifierOptions{}, 0),
		MaxAge: time.Hour, Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	now = built.Add(2 * time.Hour)
	_, err = m.Active().Decide(context.Background(), factsFor(m.Active(), map[string]any{}))
	var pe *policy.Error
	if !errors.As(err, &pe) || pe.Code != "POLICY_BUNDLE_STALE" {
		t.Fatalf("stale: %v", err)
	}
}

// A bundle refused at activation is offered again on the next poll: one
// built "in the future" (the builder's clock ahead) activates once our clock
// catches up, and a rollback keeps being counted while it is served.
func TestRefusedBundleIsRetried(t *testing.T) {
	t.Parallel()
	c := &clock{now: built}
	srv := newBundleServer(t, build(t, built.Add(time.Hour), "ahead"))
	o := &observer{}
	m, err := bundle.NewManager(bundle.Options{Deadline: patience.Deadline, Source: httpSource(t, srv.URL, bundle.VerifierOptions{}, 0), Now: c.Now, Observer: o})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Load(ctx); reasonOf(err) != bundle.ReasonFuture {
		t.Fatalf("ahead: %v", err)
	}
	c.Advance(time.Hour)
	if err := m.Load(ctx); err != nil || m.Ready() != nil {
		t.Fatalf("caught up: %v %v", err, m.Ready())
	}
	srv.publish(build(t, built, "older"))
	for range 3 {
		if err := m.Load(ctx); reasonOf(err) != bundle.ReasonRollback {
			t.Fatalf("rollback: %v", err)
		}
	}
	if o.count("failure/rollback") != 3 || o.count("success/") != 1 {
		t.Fatalf("activations %v", o.activations)
	}
}
