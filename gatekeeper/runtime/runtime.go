// Package runtime is `itogate serve` as a library, like OPA's runtime: Open
// wires one configuration into a running service — trust → policy bundles
// (and the shadow candidate) → ledger → decision log → admission pipeline →
// HTTP edge → Kubernetes webhook (when configured) — and Run serves it until
// its context ends. The binary, the in-process tests and the benchmarks all
// start the service through it, so they run the same wiring.
//
// Everything that is configuration comes from config.Config; Options carry
// the rest: the logger and the test seams (clocks, the last word on the
// admission's and the edge's options).
package runtime

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/server"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/verify"
	"github.com/itocompute/itogate/gatekeeper/version"
	"github.com/itocompute/itogate/gatekeeper/webhook"
)

// Options are what a Runtime needs beyond its configuration. The zero value
// is what `itogate serve` uses, but for the logger.
type Options struct {
	// Logger receives the service log; nil discards it.
	Logger *slog.Logger
	// Now replaces time.Now as the clock of admissions, bearer-token
	// authentication and webhook reviews (tests pin it); nil is time.Now.
	Now func() time.Time
	// BundleClock replaces time.Now for the enforced bundle's age and
	// staleness (tests age a bundle without waiting); nil is time.Now.
	BundleClock func() time.Time
	// Admission and Server, when set, get the last word on the admission
	// pipeline's and the HTTP edge's options, right before each is built:
	// a test swaps the policy, takes away the eval authority or the ticket
	// signer. `itogate serve` leaves them nil.
	Admission func(*admission.Options)
	Server    func(*server.Options)
	// DecisionLog, when set, gets the last word on the decision log's
	// writer and options: a test wraps the file in a writer that fails on
	// demand (a full disk), or makes the log required on a development
	// runtime. It returns the writer to use.
	DecisionLog func(w io.Writer, opts *decisionlog.Options) io.Writer
}

// Runtime is one wired service. Open builds it, Run serves it, Close
// releases it.
type Runtime struct {
	cfg        config.Config // as opened; the current keys and bindings are gen's
	opts       Options
	log        *slog.Logger
	metrics    *server.Metrics
	bundles    *bundle.Manager
	shadow     func() admission.Decider
	store      ledger.Store
	ledgerDesc string
	dlog       *decisionlog.Logger
	closeLog   func()
	evals      admission.Evaluations
	// gen is the current keys and bindings and the handlers over them;
	// Reload swaps it whole. handler and webhook dispatch each request to
	// the generation current when it arrives.
	gen        atomic.Pointer[generation]
	reloadMu   sync.Mutex         // one Reload at a time
	svc        *admission.Service // the first generation's; later ones share its bounds (WithKeys)
	handler    http.Handler
	webhook    http.Handler // nil without a webhook section
	webhookTLS *tls.Config
	apiTLS     *tls.Config // nil: the API listener serves plain HTTP

	// cancel ends the background work (bundle polling, the ledger
	// sweeper); wg waits for it.
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Open validates cfg and wires the service: it loads the policy bundle
// (a file or bundle server that fails leaves the service not ready while
// polling goes on; the embedded bundle must load), opens and migrates the
// ledger, opens the decision log and builds the API and webhook handlers.
// ctx bounds the opening only; background work (bundle polling, the ledger
// sweeper) runs until Close. Nothing listens before Run.
func Open(ctx context.Context, cfg config.Config, opts Options) (_ *Runtime, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rt := &Runtime{cfg: cfg, opts: opts, log: opts.Logger, metrics: server.NewMetrics(), cancel: cancel}
	reasons := make([]string, 0, len(bundle.Reasons()))
	for _, r := range bundle.Reasons() {
		reasons = append(reasons, string(r))
	}
	rt.metrics.InitBundleActivations(reasons)
	defer func() {
		if err != nil {
			rt.Close()
		}
	}()
	g := &generation{cfg: cfg}
	if err := safefile.Consistent(readAttempts, func(read config.ReadFunc) (err error) {
		g.trust, err = trust.Load(cfg, read)
		return err
	}); err != nil {
		return nil, err
	}
	// data_dir holds the default ledger file and decision log; create it for
	// the owner only (it is the same with a PostgreSQL ledger: the decision
	// log defaults to it).
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("data_dir: %w", err)
		}
	}
	if err := rt.startBundles(ctx, bg); err != nil {
		return nil, err
	}
	if rt.store, rt.ledgerDesc, err = openLedger(ctx, cfg, rt.log); err != nil {
		return nil, err
	}
	rt.startSweeper(bg, sweepInterval(cfg.Ledger))
	if rt.dlog, rt.closeLog, err = rt.openDecisionLog(); err != nil {
		return nil, err
	}
	if err := rt.startShadow(ctx, bg); err != nil {
		return nil, err
	}
	if err := rt.buildHandler(g); err != nil {
		return nil, err
	}
	rt.metrics.Evaluations(rt.svc.InFlight)
	rt.metrics.VerificationCachesFunc(func() []*verify.TokenVerifier {
		ts := rt.gen.Load().trust
		return []*verify.TokenVerifier{ts.Callers, ts.Depositors, ts.Entitlement, ts.Confirmation}
	})
	rt.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { rt.gen.Load().api.ServeHTTP(w, r) })
	if cfg.Webhook != nil {
		if err := rt.buildWebhook(g); err != nil {
			return nil, err
		}
		if err := rt.openWebhookTLS(); err != nil {
			return nil, err
		}
		rt.webhook = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { rt.gen.Load().webhook.ServeHTTP(w, r) })
	}
	rt.gen.Store(g)
	rt.metrics.ReloadLoaded(time.Now())
	if cfg.TLS != nil {
		// The same reloading pair as the webhook's: cert-manager renews
		// both in place.
		certs, err := webhook.NewCertReloader(cfg.TLS.CertFile, cfg.TLS.KeyFile, rt.log.With("listener", "api"))
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		if rt.apiTLS, err = webhook.TLSConfig(certs, ""); err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
	}
	return rt, nil
}

// buildHandler builds g's admission pipeline and the API router over it.
// The first generation's pipeline is built from scratch (rt.svc); a
// reloaded one is rt.svc with g's keys (admission.Service.WithKeys), so
// that every generation shares the evaluation bounds.
func (rt *Runtime) buildHandler(g *generation) error {
	ts, log, m := g.trust, rt.log, rt.metrics
	if rt.svc != nil {
		return rt.buildReloadedHandler(g)
	}
	slots, queue, wait := rt.cfg.Limits.Evaluations(goruntime.GOMAXPROCS(0))
	rt.evals = admission.Evaluations{Slots: slots, Queue: queue, Wait: wait}.Effective()
	aopts := admission.Options{
		Entitlement: ts.Entitlement, Confirmation: ts.Confirmation, Manifests: ts.Manifests, Evals: evalAuthority(ts),
		Ledger: rt.store, Policy: rt.bundles.Active, Logger: log, DecisionLog: rt.dlog, Now: rt.opts.Now,
		OnLedgerError: m.LedgerError,
		OnRunGPUs:     m.RunGPUs,
		Evaluations:   rt.evals,
		Shadow:        rt.shadow,
		Tickets:       ticketSigner(ts),
		OnShadow: func(r admission.ShadowResult) {
			m.Shadow(r.Kind)
			if !r.Agree && r.Kind != "skipped" {
				log.Warn("shadow bundle disagrees", "decision_id", r.DecisionID, "kind", r.Kind,
					"enforced_revision", r.EnforcedRevision, "shadow_revision", r.ShadowRevision,
					"enforced_codes", r.EnforcedCodes, "shadow_codes", r.ShadowCodes)
			}
		},
	}
	if ts.Tickets != nil {
		tv, err := ticketVerifier(g)
		if err != nil {
			return err
		}
		aopts.TicketVerifier = tv
		if g.cfg.Tickets != nil {
			aopts.TicketLifetime = time.Duration(g.cfg.Tickets.Lifetime)
		}
	}
	if jobs, ok := rt.store.(ledger.Jobs); ok {
		aopts.Jobs = jobs
	}
	if rt.opts.Admission != nil {
		rt.opts.Admission(&aopts)
	}
	svc, err := admission.New(aopts)
	if err != nil {
		return err
	}
	rt.svc = svc
	return rt.buildRouter(g, svc)
}

// buildReloadedHandler is buildHandler for a reloaded generation.
func (rt *Runtime) buildReloadedHandler(g *generation) error {
	ts := g.trust
	k := admission.Keys{
		Entitlement: ts.Entitlement, Confirmation: ts.Confirmation, Evals: evalAuthority(ts), Manifests: ts.Manifests,
		Tickets: ticketSigner(ts),
	}
	if ts.Tickets != nil {
		tv, err := ticketVerifier(g)
		if err != nil {
			return err
		}
		k.TicketVerifier = tv
		if g.cfg.Tickets != nil {
			k.TicketLifetime = time.Duration(g.cfg.Tickets.Lifetime)
		}
	}
	svc, err := rt.svc.WithKeys(k)
	if err != nil {
		return err
	}
	return rt.buildRouter(g, svc)
}

// buildRouter builds g's API router over svc.
func (rt *Runtime) buildRouter(g *generation, svc *admission.Service) error {
	ts, log, m := g.trust, rt.log, rt.metrics
	sopts := server.Options{
		Admission: svc, Callers: ts.Callers, Depositors: ts.Depositors, Revokers: revokers(ts),
		Schedulers:   schedulers(ts),
		Ready:        rt.ready,
		ReadyInfo:    map[string]any{"version": version.Get().Version, "ledger_schema": rt.ledgerSchema()},
		MaxBodyBytes: rt.cfg.Limits.MaxBodyBytes, RequestTimeout: time.Duration(rt.cfg.Limits.RequestTimeout),
		Metrics: m, Logger: log, Now: rt.opts.Now, TicketJWKS: ticketJWKS(ts),
	}
	if rt.opts.Server != nil {
		rt.opts.Server(&sopts)
	}
	h, err := server.New(sopts)
	if err != nil {
		return err
	}
	g.api = h
	return nil
}

// ready is /readyz: a verified bundle is active and not stale, the ledger
// answers, and — when it is required (production) — the decision log can be
// written. A failing log is tried again here (its gap line), so it turns
// ready again without waiting for an admission.
func (rt *Runtime) ready(ctx context.Context) error {
	if err := rt.bundles.Ready(); err != nil {
		return err
	}
	if err := rt.store.Ping(ctx); err != nil {
		if h, ok := rt.store.(interface{ HoldUntil() time.Time }); ok && time.Now().Before(h.HoldUntil()) {
			// Not a fault: a restore's hold (README: Restore).
			return fmt.Errorf("ledger restored from a backup: held until %s", h.HoldUntil().Format(time.RFC3339))
		}
		return errors.New("ledger unreachable")
	}
	if rt.dlog != nil && rt.dlog.Required() {
		if err := rt.dlog.Probe(ctx); err != nil {
			return errors.New("decision log cannot be written")
		}
	}
	return nil
}

// The optional verifiers and the ticket signer, as the admission and the
// server take them: a nil interface, never an interface holding a nil
// pointer (which would not read as "none").

func evalAuthority(ts *trust.Set) admission.TokenVerifier {
	if ts.Evals == nil {
		return nil
	}
	return ts.Evals
}

func revokers(ts *trust.Set) admission.TokenVerifier {
	if ts.Revokers == nil {
		return nil
	}
	return ts.Revokers
}

func schedulers(ts *trust.Set) admission.TokenVerifier {
	if ts.Schedulers == nil {
		return nil
	}
	return ts.Schedulers
}

func ticketSigner(ts *trust.Set) admission.TicketSigner {
	if ts.Tickets == nil {
		return nil
	}
	return ts.Tickets
}

func ticketJWKS(ts *trust.Set) []byte {
	if ts.Tickets == nil {
		return nil
	}
	return ts.Tickets.JWKS()
}

// Handler is the API router (/v1/…, /healthz, /readyz, /metrics).
func (rt *Runtime) Handler() http.Handler { return rt.handler }

// WebhookHandler is the Kubernetes webhook's router (/validate, /healthz),
// nil without a webhook section.
func (rt *Runtime) WebhookHandler() http.Handler { return rt.webhook }

// HTTPServer is the http.Server Run serves the API with, around h: the
// runtime's Handler, or a test's wrapper of it (server.HTTPServer with the
// configured request timeout).
func (rt *Runtime) HTTPServer(h http.Handler) *http.Server {
	return server.HTTPServer(h, time.Duration(rt.cfg.Limits.RequestTimeout))
}

// Ledger is the open ledger.
func (rt *Runtime) Ledger() ledger.Store { return rt.store }

// Bundles holds the enforced policy bundle.
func (rt *Runtime) Bundles() *bundle.Manager { return rt.bundles }

// DecisionLog is the decision log, nil when decision_log is "off".
func (rt *Runtime) DecisionLog() *decisionlog.Logger { return rt.dlog }

// Config is the configuration in force: the one the runtime was opened
// with, its trust, tickets and webhook namespaces as last (re)loaded.
func (rt *Runtime) Config() config.Config { return rt.gen.Load().cfg }

// Close stops the background work and waits for it, then closes the
// decision log (writing what it holds) and the ledger. It does not stop
// Run; end Run's context first. Calling it again does nothing.
func (rt *Runtime) Close() error {
	var err error
	rt.closeOnce.Do(func() {
		rt.cancel()
		rt.wg.Wait()
		if rt.closeLog != nil {
			rt.closeLog()
		}
		if rt.store != nil {
			err = rt.store.Close()
		}
	})
	return err
}
