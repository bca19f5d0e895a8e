package server

import (
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/verify"
	"github.com/itocompute/itogate/gatekeeper/version"
)

// Metrics are itogate's Prometheus collectors, on their own registry so tests
// can build several servers in one process.
type Metrics struct {
	reg        *prometheus.Registry
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	decisions  *prometheus.CounterVec
	verifyFail *prometheus.CounterVec
	bundleInfo *prometheus.GaugeVec
	logDropped *prometheus.CounterVec
	logOK      prometheus.Gauge
	ledgerErrs *prometheus.CounterVec
	shadow     *prometheus.CounterVec
	// the booking as one object, aggregated over every booking (a booking
	// id is never a label: bookings are unbounded)
	runGPUs     *prometheus.CounterVec
	bookingFill prometheus.Histogram
	// bundle activations and the active bundle's age (gatekeeper/bundle)
	bundleActivations *prometheus.CounterVec
	bundleBuiltAt     atomic.Int64 // unix nanoseconds of the signed built_at; 0: unknown
	bundleAge         prometheus.Collector
	// the Kubernetes webhook (gatekeeper/webhook), served on this registry
	webhookReviews  *prometheus.CounterVec
	webhookDuration *prometheus.HistogramVec
	webhookPanics   prometheus.Counter
	// reloads of the trust keys and namespace bindings (SIGHUP)
	reloads      *prometheus.CounterVec
	reloadLastOK prometheus.Gauge
}

// NewMetrics registers the collectors. Histogram buckets run to 2.5 s:
// beyond the default evaluation deadline every request is already a deny.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "itogate_http_requests_total", Help: "HTTP requests by method, route and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "itogate_http_request_duration_seconds",
			Help:    "HTTP request latency in seconds by route.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "itogate_admission_decisions_total",
			Help: "Admission outcomes by decision (allow, deny) and code (one count per violation code; \"\" on allow).",
		}, []string{"decision", "code"}),
		verifyFail: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "itogate_verification_failures_total", Help: "Token verification failures by purpose and kind.",
		}, []string{"purpose", "kind"}),
		bundleInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "itogate_policy_bundle_info", Help: "The active policy bundle (value 1) by revision and digest.",
		}, []string{"revision", "digest"}),
	}
	m.logDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "itogate_decision_log_dropped_total",
		Help: "Decision-log events dropped, by reason (mask_failed, guard, queue_full, encode, write); never written unmasked.",
	}, []string{"reason"})
	// Every reason's series exists from the start (at 0), so an alert on
	// increase() fires on the first drop.
	for _, r := range decisionlog.DropReasons {
		m.logDropped.WithLabelValues(r)
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "itogate_build_info",
		Help: "The running binary (value 1) by version, commit and Go version (`itogate version`).",
	}, []string{"version", "commit", "go_version"})
	bi := version.Get()
	build.WithLabelValues(bi.Version, bi.Commit, bi.GoVersion).Set(1)
	m.reg.MustRegister(build)
	m.logOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "itogate_decision_log_writable",
		Help: "1 while the decision log can be written, 0 while it cannot (production then refuses allows with 503 DECISION_LOG_UNAVAILABLE).",
	})
	m.ledgerErrs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "itogate_ledger_errors_total",
		Help: "Ledger failures by operation; each answered 503 LEDGER_UNAVAILABLE.",
	}, []string{"op"})
	m.shadow = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "itogate_shadow_decisions_total",
		Help: "Candidate-bundle (shadow) evaluations by outcome: agree, allow_to_deny, deny_to_allow, codes, error, skipped.",
	}, []string{"kind"})
	m.runGPUs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "itogate_run_gpus_total",
		Help: "GPUs of booked capacity by event: admitted (train.create allows, the run's world size, and " +
			"train.stage.advance allows that grew their run to a larger stage, the difference) and " +
			"released (live runs ended by train.cancel or train.cleanup allows, what they held). Summed over all bookings.",
	}, []string{"event"})
	m.bookingFill = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "itogate_booking_held_ratio",
		Help: "At each train.create allow (and each stage advance that grew its run), the GPUs its booking then holds " +
			"(live runs plus the new one or the growth) over the GPUs it booked. Aggregated over all bookings; 1 is a full booking.",
		Buckets: []float64{.125, .25, .5, .75, .875, 1},
	})
	m.reg.MustRegister(m.logDropped, m.logOK, m.ledgerErrs, m.shadow, m.runGPUs, m.bookingFill)
	m.bundleActivations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "itogate_bundle_activations_total",
		Help: "Policy bundle activation attempts by result (success, failure) and reason (\"\" on success; fetch, too_large, " +
			"archive, path, unsigned, signature, invalid, manifest, compile, facts_model, rollback, revision_reused, stale, future).",
	}, []string{"result", "reason"})
	m.bundleAge = bundleAgeCollector{m: m, desc: prometheus.NewDesc("itogate_bundle_age_seconds",
		"Seconds since the active policy bundle was built (the signed built_at in its .manifest); absent for the "+
			"embedded bundle. Admissions are denied with POLICY_BUNDLE_STALE beyond policy.bundle.max_age.", nil, nil)}
	m.reg.MustRegister(m.bundleActivations, m.bundleAge)
	m.webhookReviews = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "itogate_webhook_reviews_total",
		Help: "Kubernetes admission reviews answered by the webhook, by result (allowed, denied, invalid, warned: " +
			"admitted in a warn-mode namespace although enforcement would deny) and the stable code leading the denial " +
			"(\"\" when allowed; one count per review).",
	}, []string{"result", "code"})
	m.webhookDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "itogate_webhook_review_duration_seconds",
		Help: "Kubernetes admission review latency in the webhook handler (body read to response written), by result.",
		// From 0.5 ms (one review's CPU) to the review bound (webhook.timeout, default 2 s) and beyond.
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"result"})
	m.webhookPanics = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "itogate_webhook_panics_total",
		Help: "Kubernetes admission reviews whose evaluation panicked: each was recovered and answered denied INTERNAL_ERROR.",
	})
	m.reg.MustRegister(m.webhookReviews, m.webhookDuration, m.webhookPanics)
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "itogate_reloads_total",
		Help: "Reloads of the trust keys, ticket keys and webhook namespace bindings (SIGHUP) by result (success, failure); " +
			"a failed reload keeps the previous set.",
	}, []string{"result"})
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	m.reloadLastOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "itogate_reload_last_success_timestamp_seconds",
		Help: "Unix time of the last successful load of the trust keys and namespace bindings (start-up or SIGHUP).",
	})
	m.reg.MustRegister(m.reloads, m.reloadLastOK)
	m.reg.MustRegister(m.requests, m.duration, m.decisions, m.verifyFail, m.bundleInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Shadow counts one shadow comparison.
func (m *Metrics) Shadow(kind string) { m.shadow.WithLabelValues(kind).Inc() }

// Evaluations exports, at scrape time, the policy evaluations running and
// the requests waiting for an evaluation slot (admission.Evaluations), as
// itogate_policy_evaluations_in_flight{state="running"|"waiting"}.
func (m *Metrics) Evaluations(inFlight func() (running, waiting int)) {
	desc := prometheus.NewDesc("itogate_policy_evaluations_in_flight",
		"Policy evaluations running, and admissions waiting for an evaluation slot (limits.max_concurrent_evaluations).",
		[]string{"state"}, nil)
	m.reg.MustRegister(gaugeFunc{desc: desc, collect: func(ch chan<- prometheus.Metric) {
		running, waiting := inFlight()
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(running), "running")
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(waiting), "waiting")
	}})
}

// VerificationCaches exports, at scrape time, each token verifier's cache
// (verify.TokenVerifier.CacheStats) by purpose:
// itogate_verification_cache_lookups_total{purpose,result="hit"|"miss"} and
// itogate_verification_cache_entries{purpose}. Verifiers without a cache
// (confirmation) export nothing.
func (m *Metrics) VerificationCaches(verifiers ...*verify.TokenVerifier) {
	m.VerificationCachesFunc(func() []*verify.TokenVerifier { return verifiers })
}

// VerificationCachesFunc is VerificationCaches over the verifiers current
// returns at each scrape: a reload of the trust keys replaces them (with
// fresh caches, so the lookup counters start again from 0).
func (m *Metrics) VerificationCachesFunc(current func() []*verify.TokenVerifier) {
	lookups := prometheus.NewDesc("itogate_verification_cache_lookups_total",
		"Token verifications answered from the verification cache (hit: signature skipped, times re-checked) or fully verified (miss), by purpose.",
		[]string{"purpose", "result"}, nil)
	entries := prometheus.NewDesc("itogate_verification_cache_entries",
		"Successful verifications held in the verification cache, by purpose (bounded by verify.DefaultCacheEntries).",
		[]string{"purpose"}, nil)
	m.reg.MustRegister(gaugeFunc{desc: lookups, collect: func(ch chan<- prometheus.Metric) {
		for _, v := range current() {
			if st, p := v.CacheStats(), string(v.Purpose()); v.Caching() {
				ch <- prometheus.MustNewConstMetric(lookups, prometheus.CounterValue, float64(st.Hits), p, "hit")
				ch <- prometheus.MustNewConstMetric(lookups, prometheus.CounterValue, float64(st.Misses), p, "miss")
				ch <- prometheus.MustNewConstMetric(entries, prometheus.GaugeValue, float64(st.Entries), p)
			}
		}
	}, also: []*prometheus.Desc{entries}})
}

// gaugeFunc is a collector reading its values when scraped.
type gaugeFunc struct {
	desc    *prometheus.Desc
	collect func(chan<- prometheus.Metric)
	also    []*prometheus.Desc // further metrics collect sends
}

func (g gaugeFunc) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.desc
	for _, d := range g.also {
		ch <- d
	}
}
func (g gaugeFunc) Collect(ch chan<- prometheus.Metric) { g.collect(ch) }

// RunGPUs records booked capacity taken or given back: event "admitted"
// with the booking's GPUs held after it (held) and booked, or "released".
func (m *Metrics) RunGPUs(event string, gpus, held, booked int) {
	m.runGPUs.WithLabelValues(event).Add(float64(gpus))
	if event == "admitted" && booked > 0 {
		m.bookingFill.Observe(float64(held) / float64(booked))
	}
}

// WebhookReview counts one answered Kubernetes admission review
// (webhook.Observer). result outside allowed, denied, invalid and warned is
// labelled "other"; code is a stable code or "other" (codeLabel), "" only
// when allowed.
func (m *Metrics) WebhookReview(result, code string, d time.Duration) {
	switch result {
	case "allowed":
		code = ""
	case "denied", "invalid", "warned":
		code = codeLabel(code)
	default:
		result, code = "other", codeLabel(code)
	}
	m.webhookReviews.WithLabelValues(result, code).Inc()
	m.webhookDuration.WithLabelValues(result).Observe(d.Seconds())
}

// WebhookPanic counts one recovered panic of a webhook review
// (webhook.Observer).
func (m *Metrics) WebhookPanic() { m.webhookPanics.Inc() }

// Reload counts one reload of the trust keys and namespace bindings,
// result "success" or "failure", at t; a success sets the last-success
// timestamp to t.
func (m *Metrics) Reload(result string, t time.Time) {
	m.reloads.WithLabelValues(result).Inc()
	if result == "success" {
		m.ReloadLoaded(t)
	}
}

// ReloadLoaded sets the last-success timestamp to t without counting a
// reload (the load at start-up).
func (m *Metrics) ReloadLoaded(t time.Time) {
	m.reloadLastOK.Set(float64(t.UnixNano()) / 1e9)
}

// LedgerError counts one ledger failure.
func (m *Metrics) LedgerError(op string) { m.ledgerErrs.WithLabelValues(op).Inc() }

// DecisionLogDropped counts one dropped decision-log event.
func (m *Metrics) DecisionLogDropped(reason string) { m.logDropped.WithLabelValues(reason).Inc() }

// DecisionLogWritable sets itogate_decision_log_writable.
func (m *Metrics) DecisionLogWritable(ok bool) {
	v := 0.0
	if ok {
		v = 1
	}
	m.logOK.Set(v)
}

// SetBundle records the active bundle.
func (m *Metrics) SetBundle(revision, digest string) {
	m.bundleInfo.Reset()
	m.bundleInfo.WithLabelValues(revision, digest).Set(1)
}

// InitBundleActivations creates the activation series at 0 — success, and
// failure for each reason — so that increase(…{result="failure"}[15m]) > 0
// fires on the first failure rather than when a series first appears.
func (m *Metrics) InitBundleActivations(failureReasons []string) {
	m.bundleActivations.WithLabelValues("success", "")
	for _, r := range failureReasons {
		m.bundleActivations.WithLabelValues("failure", r)
	}
}

// BundleActivation counts one bundle activation attempt (bundle.Observer).
func (m *Metrics) BundleActivation(result, reason string) {
	m.bundleActivations.WithLabelValues(result, reason).Inc()
}

// BundleActive records a newly active bundle (bundle.Observer); a zero
// builtAt (the embedded bundle) leaves the age unreported.
func (m *Metrics) BundleActive(revision, digest string, builtAt time.Time) {
	m.SetBundle(revision, digest)
	if builtAt.IsZero() {
		m.bundleBuiltAt.Store(0)
		return
	}
	m.bundleBuiltAt.Store(builtAt.UnixNano())
}

// bundleAgeCollector computes the bundle age at scrape time.
type bundleAgeCollector struct {
	m    *Metrics
	desc *prometheus.Desc
}

func (c bundleAgeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c bundleAgeCollector) Collect(ch chan<- prometheus.Metric) {
	if ns := c.m.bundleBuiltAt.Load(); ns != 0 {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, time.Since(time.Unix(0, ns)).Seconds())
	}
}

// Every label value comes from a closed set the server defines: a value a
// client chooses (method, path) would let any caller, authenticated or not,
// grow the registry without bound (one series per invented method) and put
// kilobytes into a label. Anything outside the set is labelled "other".

// methodLabel is the method if it is one of RFC 9110's, else "other".
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method
	}
	return "other"
}

// statusLabel is the status code if it is a valid HTTP status, else "other".
func statusLabel(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	return strconv.Itoa(status)
}

// codeLabel is a decision code in the stable UPPER_SNAKE shape (at most 64
// characters), else "other". Codes come from Go and from the signed bundle's
// rules; the shape keeps a rule that built its code from the input (a
// policy bug) from turning input into labels.
func codeLabel(code string) string {
	if code == "" || len(code) > 64 {
		return "other"
	}
	for i := range len(code) {
		switch c := code[i]; {
		case c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '_'):
		default:
			return "other"
		}
	}
	return code
}

func (m *Metrics) request(method, route string, status int, d time.Duration) {
	// route is chi's matched pattern, one of the routes New registers; a
	// request that matched none has no pattern.
	if route == "" {
		route = "unmatched"
	}
	m.requests.WithLabelValues(methodLabel(method), route, statusLabel(status)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}

func (m *Metrics) decision(o admission.Outcome) {
	if o.OK() {
		m.decisions.WithLabelValues("allow", "").Inc()
		return
	}
	if len(o.Violations) == 0 {
		m.decisions.WithLabelValues("deny", codeLabel(string(o.Code))).Inc()
		return
	}
	for _, v := range o.Violations {
		m.decisions.WithLabelValues("deny", codeLabel(string(v.Code))).Inc()
	}
}

func (m *Metrics) verifyFailure(purpose string, err error) {
	kind := "unknown"
	var ve *verify.Error
	if errors.As(err, &ve) {
		kind = ve.Kind.String()
		purpose = string(ve.Purpose)
	}
	m.verifyFail.WithLabelValues(purpose, kind).Inc()
}
