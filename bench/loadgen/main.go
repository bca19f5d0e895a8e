// Command loadgen drives a bounded load against itogate's POST /v1/admissions
// or against `opa run --server` at POST /v1/data/ito/admission/decision with
// the same policy input itogate builds, and prints throughput and latency
// percentiles. It only talks to loopback addresses and every run is bounded
// by -duration and by -max requests.
//
//	loadgen -target itogate -url http://127.0.0.1:P -path deny  -mode closed -workers 16 -duration 10s
//	loadgen -target itogate -url http://127.0.0.1:P -path allow -mode open   -rate 200   -duration 10s
//	loadgen -target opa     -url http://127.0.0.1:Q -path allow -mode closed -workers 16 -duration 10s
//
// -target webhook and -target opa-webhook drive Pod AdmissionReviews over
// HTTPS against itogate's Kubernetes webhook and its `opa run --server`
// peer (webhook.go).
//
// Closed loop: -workers goroutines each send the next request when the last
// one answered. Open loop: requests start on a fixed schedule (-rate per
// second) whatever the answers do, and latency is measured from the scheduled
// start, so a stalled server is not hidden (no coordinated omission).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/policies"
)

type options struct {
	target, base, path, mode, label string
	state, caFile                   string // webhook targets
	workers, rate, max, pool        int
	booking                         string
	bookingRuns                     int64
	duration                        time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.target, "target", "itogate", "itogate, opa, webhook (itogate's Kubernetes webhook) or opa-webhook (its opa run --server peer)")
	flag.StringVar(&o.base, "url", "", "base URL, loopback only (http://127.0.0.1:PORT; https:// for the webhook targets)")
	flag.StringVar(&o.state, "state", "", "webhook targets: the file -webhook-setup wrote")
	flag.StringVar(&o.caFile, "ca-file", "", "webhook targets and -webhook-setup: the PEM certificate the HTTPS server presents (-write-cert)")
	webhookSetupPath := flag.String("webhook-setup", "", "admit a run through -url (itogate's API), bind its Job through -webhook-url, write the state for the webhook targets to this file and exit")
	webhookURL := flag.String("webhook-url", "", "-webhook-setup: itogate's webhook listener (https://127.0.0.1:PORT)")
	certDir := flag.String("write-cert", "", "write a self-signed certificate for 127.0.0.1 (cert.pem, key.pem) to this directory and exit")
	flag.StringVar(&o.path, "path", "deny", "deny (parallelism deny, no ledger write) or allow (durable commit)")
	flag.StringVar(&o.mode, "mode", "closed", "closed (workers at max) or open (fixed rate)")
	flag.IntVar(&o.workers, "workers", 16, "closed loop: concurrent workers")
	flag.IntVar(&o.rate, "rate", 200, "open loop: requests per second")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "timed phase length (at most 10m)")
	flag.IntVar(&o.max, "max", 100000, "hard cap on requests in the timed phase")
	flag.IntVar(&o.pool, "pool", 0, "itogate: manifests signed and confirmations deposited before the timed phase (default: enough for the phase; the deny path cycles through them)")
	flag.StringVar(&o.booking, "booking", scenario.Booking, "itogate: the booking every request, entitlement and confirmation names")
	flag.Int64Var(&o.bookingRuns, "booking-runs", 100000, "itogate: concurrent runs the entitlement's booking holds: every allowed run stays live until its declared end (at most 2^20 nodes per booking; `make soak` uses a booking per chunk)")
	flag.StringVar(&o.label, "label", "", "row label")
	freePort := flag.Bool("free-port", false, "print a free loopback TCP port and exit")
	writeInput := flag.String("write-input", "", "print the policy input itogate builds for this fixture (e.g. llama3-8b) at the benchmarks' fixed time and exit (for opa eval / opa bench)")
	flag.Parse()
	if *writeInput != "" {
		if err := printInput(*writeInput); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		return
	}
	if *certDir != "" {
		if err := writeCert(*certDir); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		return
	}
	if *webhookSetupPath != "" {
		if err := webhookSetup(*webhookSetupPath, o.base, *webhookURL, o.caFile); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen: webhook setup:", err)
			os.Exit(1)
		}
		return
	}
	if *freePort {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		return
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// loopbackURL: raw is scheme://<loopback address>:PORT.
func loopbackURL(raw, scheme string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != scheme {
		return fmt.Errorf("url %q must be %s://127.0.0.1:PORT", raw, scheme)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("url %s: only loopback addresses are allowed", raw)
	}
	return nil
}

func run(o options) error {
	webhookTarget := o.target == "webhook" || o.target == "opa-webhook"
	scheme := "http"
	if webhookTarget {
		scheme = "https"
	}
	if err := loopbackURL(o.base, scheme); err != nil {
		return fmt.Errorf("-url: %w", err)
	}
	if o.duration <= 0 || o.duration > 10*time.Minute {
		return fmt.Errorf("-duration must be in (0, 10m]")
	}
	if o.path != "deny" && o.path != "allow" && !webhookTarget {
		return fmt.Errorf("-path must be deny or allow")
	}
	if o.mode != "closed" && o.mode != "open" {
		return fmt.Errorf("-mode must be closed or open")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 2048, MaxIdleConnsPerHost: 2048, IdleConnTimeout: 30 * time.Second, DisableCompression: true,
	}}
	var next func(i int) (*http.Request, error)
	var want int
	var err error
	if webhookTarget {
		if hc, err = tlsClient(o.caFile); err != nil {
			return err
		}
		// A review is served only when answered allowed, as it must be.
		okBody = allowedBody
	}
	switch o.target {
	case "webhook", "opa-webhook":
		next, want, err = webhookRequests(hc, o)
	case "itogate":
		next, want, err = itogateRequests(ctx, o)
	case "opa":
		next, want, err = opaRequests(o)
	default:
		err = fmt.Errorf("-target must be itogate, opa, webhook or opa-webhook")
	}
	if err != nil {
		return err
	}
	// One untimed request shows what the server answers (status, codes).
	if req, err := next(-1); err == nil {
		if st, body, err := do(hc, req); err == nil {
			fmt.Fprintf(os.Stderr, "loadgen: sample %s %s: HTTP %d %s\n", o.target, o.path, st, summary(body))
		} else if !errors.Is(err, errPoolEmpty) {
			return err
		}
	}

	var res result
	switch o.mode {
	case "closed":
		res = closedLoop(hc, next, want, o)
	case "open":
		res = openLoop(hc, next, want, o)
	}
	res.print(o)
	return nil
}

var errPoolEmpty = errors.New("confirmation pool exhausted")

// okBody, when set, must also hold of an answer with the expected status
// for it to count as served (the webhook targets: allowed).
var okBody func([]byte) bool

func do(hc *http.Client, req *http.Request) (int, []byte, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, body, err
}

func summary(body []byte) string {
	if allowed, code, err := reviewVerdict(body); err == nil {
		return fmt.Sprintf("review allowed=%v %s", allowed, code)
	}
	var env struct {
		Result *struct {
			Allow      bool `json:"allow"`
			Violations []struct {
				Code string `json:"code"`
			} `json:"violations"`
		} `json:"result"`
		Error *struct {
			Code       string `json:"code"`
			Violations []struct {
				Code string `json:"code"`
			} `json:"violations"`
		} `json:"error"`
		Data *struct {
			Decision string `json:"decision"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &env) != nil {
		return fmt.Sprintf("%.200q", body)
	}
	switch {
	case env.Result != nil:
		var c []string
		for _, v := range env.Result.Violations {
			c = append(c, v.Code)
		}
		return fmt.Sprintf("allow=%v violations=%v", env.Result.Allow, c)
	case env.Error != nil:
		c := []string{env.Error.Code}
		for _, v := range env.Error.Violations {
			c = append(c, v.Code)
		}
		return fmt.Sprintf("deny %v", c)
	case env.Data != nil:
		return "decision=" + env.Data.Decision
	}
	return fmt.Sprintf("%.200q", body)
}

// manifestFor: allow admits llama3-8b; deny sends the V100 FSDP manifest
// that every verification accepts and the parallelism gate denies (with a
// computed fix), so the deny path runs the whole pipeline but the commit.
func manifestFor(path string) string {
	if path == "allow" {
		return "llama3-8b"
	}
	return "llama2-70b-v100-fsdp"
}

// itogateRequests mints the caller and entitlement tokens once (reused, as
// real traffic does), deposits the confirmations (one reused for deny, one
// per request for allow) and returns a request builder.
func itogateRequests(ctx context.Context, o options) (func(int) (*http.Request, error), int, error) {
	r, err := scenario.New(o.base, fixtures.Manifests())
	if err != nil {
		return nil, 0, err
	}
	m, err := r.LoadManifest(manifestFor(o.path))
	if err != nil {
		return nil, 0, err
	}
	caller, err := scenario.CallerToken()
	if err != nil {
		return nil, 0, err
	}
	ent, err := r.EntitlementForRuns(m, o.booking, o.bookingRuns)
	if err != nil {
		return nil, 0, err
	}
	budget, _ := m.Doc["budget"].(map[string]any)
	cost, _ := budget["ceiling_usd"].(string)

	// Every request carries its own manifest (the fixture with a numbered
	// name, signed) and its own confirmation bound to that manifest, as in
	// real traffic: nothing can be served from a cache keyed by either.
	// A deny consumes nothing, so the deny path cycles through its pool.
	n := o.pool
	if n <= 0 {
		if o.mode == "open" {
			n = o.rate*int(o.duration/time.Second) + 50
		} else {
			n = 800 * int(o.duration/time.Second) // above what 2 cores evaluate (~400 allows/s measured)
		}
	}
	n = min(n+1, o.max+1, 50000) // +1 for the sample request
	type prepared struct {
		m   scenario.Manifest
		ref string
	}
	refs := make(chan prepared, n)
	start := time.Now()
	var wg sync.WaitGroup
	var firstErr atomic.Value
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	var seq atomic.Int64
	for range min(16, n) {
		wg.Go(func() {
			for range jobs {
				v, err := r.SignManifest(variant(m.Raw, int(seq.Add(1))))
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				ref, err := r.ConfirmWith(ctx, "train.create", manifest.Digest(v.Raw), cost, "",
					func(c map[string]any) { c["booking_id"] = o.booking })
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				refs <- prepared{v, ref}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, 0, fmt.Errorf("deposit: %w", err)
	}
	close(refs)
	fmt.Fprintf(os.Stderr, "loadgen: signed %d manifests and deposited a confirmation for each in %v\n",
		n, time.Since(start).Round(time.Millisecond))
	var pool []prepared
	if o.path == "deny" {
		for p := range refs {
			pool = append(pool, p)
		}
	}
	runTag := fmt.Sprintf("%x", time.Now().UnixNano())
	want := http.StatusForbidden
	if o.path == "allow" {
		want = http.StatusOK
	}
	next := func(i int) (*http.Request, error) {
		var p prepared
		if pool != nil {
			p = pool[(i+1)%len(pool)]
		} else {
			var ok bool
			if p, ok = <-refs; !ok {
				return nil, errPoolEmpty
			}
		}
		body, err := json.Marshal(api.AdmissionRequest{
			Action: api.TrainCreate, BookingID: o.booking,
			IdempotencyKey: fmt.Sprintf("lg-%s-%s-%d", o.path, runTag, i),
			Manifest:       p.m.Raw, ManifestSignature: p.m.Signature,
			EntitlementToken: ent, ConfirmationRef: p.ref,
		})
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequest(http.MethodPost, o.base+"/v1/admissions", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+caller)
		return req, nil
	}
	return next, want, nil
}

// opaRequests posts {"input": ...} built exactly like
// gatekeeper/policy/bench_test.go builds the input itogate evaluates.
func opaRequests(o options) (func(int) (*http.Request, error), int, error) {
	raw, err := fs(manifestFor(o.path))
	if err != nil {
		return nil, 0, err
	}
	// The same distinct manifests as the itogate load (numbered names), each
	// request with its own input.
	const distinct = 1024
	bodies := make([][]byte, distinct)
	for i := range bodies {
		v := variant(raw, i+1)
		doc, err := manifest.Parse(v)
		if err != nil {
			return nil, 0, err
		}
		if bodies[i], err = json.Marshal(map[string]any{"input": policyInput(v, doc, time.Now())}); err != nil {
			return nil, 0, err
		}
	}
	next := func(i int) (*http.Request, error) {
		body := bodies[(i+distinct)%distinct]
		req, err := http.NewRequest(http.MethodPost, o.base+"/v1/data/ito/admission/decision", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		return req, nil
	}
	return next, http.StatusOK, nil
}

func fs(name string) ([]byte, error) {
	f, err := fixtures.Manifests().Open(name + ".json")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// variant is the fixture with "-r<i>" appended to its top-level name: a
// distinct manifest (and digest) per request, identical to the policy
// otherwise. The name is the first "name" member of every fixture.
func variant(raw []byte, i int) []byte {
	const key = `"name": "`
	at := bytes.Index(raw, []byte(key))
	if at < 0 {
		panic("fixture without a top-level name")
	}
	end := at + len(key) + bytes.IndexByte(raw[at+len(key):], '"')
	out := make([]byte, 0, len(raw)+16)
	out = append(out, raw[:end]...)
	out = append(out, fmt.Sprintf("-r%06d", i)...)
	return append(out, raw[end:]...)
}

// printInput writes the input of gatekeeper/policy's BenchmarkDecide for a
// fixture (evaluated at 2025-11-29T08:00:00Z, as there) to stdout.
func printInput(name string) error {
	raw, err := fs(name)
	if err != nil {
		return err
	}
	doc, err := manifest.Parse(raw)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(policyInput(raw, doc, time.Unix(1764403200, 0)))
}

// embeddedFacts is the training-facts model of the embedded bundle as the
// engine wires it (its default deadline), with the fix search and its
// confirmation; nil, and inputs without facts, if the bundle cannot be
// activated. Built once: activation compiles the whole bundle.
var embeddedFacts = sync.OnceValue(func() *trainfacts.Model {
	e, err := policy.New(context.Background(), policy.Options{Bundle: policies.Bundle()})
	if err != nil {
		return nil
	}
	return e.Facts()
})

// policyInput is the document itogate builds for the same request (with the
// embedded bundle's training facts).
func policyInput(raw []byte, doc map[string]any, now time.Time) map[string]any {
	return scenario.OfflineInput(raw, doc, nil, nil, now, embeddedFacts())
}

type result struct {
	sent, ok, bad, errs int
	shed                int // 503 ADMISSION_OVERLOADED: refused at once, nothing evaluated
	dropped             int
	first               string
	elapsed             time.Duration
	lat                 []time.Duration // every request
	okLat               []time.Duration // requests answered with the expected status
	poolEmpty           bool
}

type sample struct {
	lat    time.Duration
	status int
	body   []byte
	err    error
}

func record(res *result, mu *sync.Mutex, s sample, want int) {
	mu.Lock()
	defer mu.Unlock()
	res.sent++
	switch {
	case s.err != nil:
		res.errs++
		if res.first == "" {
			res.first = s.err.Error()
		}
	case s.status == http.StatusServiceUnavailable && bytes.Contains(s.body, []byte(`"ADMISSION_OVERLOADED"`)):
		res.shed++
	case s.status != want || (okBody != nil && !okBody(s.body)):
		res.bad++
		if res.first == "" {
			res.first = fmt.Sprintf("HTTP %d %s", s.status, summary(s.body))
		}
	default:
		res.ok++
		res.okLat = append(res.okLat, s.lat)
	}
	res.lat = append(res.lat, s.lat)
}

func closedLoop(hc *http.Client, next func(int) (*http.Request, error), want int, o options) result {
	var res result
	var mu sync.Mutex
	var seq atomic.Int64
	var empty atomic.Bool
	start := time.Now()
	deadline := start.Add(o.duration)
	var wg sync.WaitGroup
	for range o.workers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				i := int(seq.Add(1))
				if i > o.max {
					return
				}
				req, err := next(i)
				if errors.Is(err, errPoolEmpty) {
					empty.Store(true)
					return
				}
				t0 := time.Now()
				st, body, err := do(hc, req)
				record(&res, &mu, sample{time.Since(t0), st, body, err}, want)
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.poolEmpty = empty.Load()
	return res
}

func openLoop(hc *http.Client, next func(int) (*http.Request, error), want int, o options) result {
	var res result
	var mu sync.Mutex
	total := min(o.rate*int(o.duration/time.Second), o.max)
	interval := time.Second / time.Duration(o.rate)
	inflight := make(chan struct{}, 1024) // bound on concurrent requests
	var wg sync.WaitGroup
	start := time.Now()
	// A server slower than the rate would make the schedule run for ever:
	// nothing starts after duration+5s; what is left counts as dropped.
	hardStop := time.NewTimer(o.duration + 5*time.Second)
	defer hardStop.Stop()
	stopped := false
	for i := 0; i < total && !stopped; i++ {
		sched := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(sched))
		req, err := next(i)
		if errors.Is(err, errPoolEmpty) {
			res.poolEmpty = true
			break
		}
		select {
		case inflight <- struct{}{}:
		case <-hardStop.C:
			mu.Lock()
			res.dropped = total - i
			mu.Unlock()
			stopped = true
			continue
		}
		wg.Go(func() {
			defer func() { <-inflight }()
			st, body, err := do(hc, req)
			record(&res, &mu, sample{time.Since(sched), st, body, err}, want)
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func (r result) print(o options) {
	slices.Sort(r.lat)
	slices.Sort(r.okLat)
	shape := fmt.Sprintf("closed %d workers", o.workers)
	if o.mode == "open" {
		shape = fmt.Sprintf("open %d/s", o.rate)
	}
	label := o.label
	if label == "" {
		label = o.target + " " + o.path
		if o.target == "webhook" || o.target == "opa-webhook" {
			label = o.target + " Pod review"
		}
	}
	note := ""
	if r.poolEmpty {
		note = "confirmation pool exhausted; "
	}
	if r.dropped > 0 {
		note += fmt.Sprintf("%d of the schedule never started (server slower than the rate); ", r.dropped)
	}
	if r.first != "" {
		note += "first failure: " + r.first
	}
	var maxLat time.Duration
	if len(r.lat) > 0 {
		maxLat = r.lat[len(r.lat)-1]
	}
	// | label | shape | requests | ok | shed | wrong status | errors | ok req/s | p50 | p90 | p99 | max | ok p50 | ok p99 | note |
	fmt.Printf("| %s | %s | %d | %d | %d | %d | %d | %.0f | %s | %s | %s | %s | %s | %s | %s |\n",
		label, shape, r.sent, r.ok, r.shed, r.bad, r.errs, float64(r.ok)/r.elapsed.Seconds(),
		ms(pct(r.lat, .50)), ms(pct(r.lat, .90)), ms(pct(r.lat, .99)), ms(maxLat),
		ms(pct(r.okLat, .50)), ms(pct(r.okLat, .99)), note)
}
