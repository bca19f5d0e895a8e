package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/server"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/policies"
)

type serveOptions struct {
	configFile string
	listen     string
	dataDir    string
	// Development mode only: a PostgreSQL ledger instead of bbolt, and the
	// policy and request deadlines (multi-replica and load tests run several
	// servers on one machine).
	ledgerDSN      string
	ledgerSchema   string
	ledgerTimeout  time.Duration
	policyDeadline time.Duration
	requestTimeout time.Duration
	// Development mode only: a signed bundle (file or bundle server URL)
	// instead of the embedded one, verified with the development bundle key.
	bundleFile     string
	shadowFile     string
	maxEvaluations int
	maxQueueWait   time.Duration
	bundleURL      string
	bundlePoll     time.Duration
	bundleMaxAge   time.Duration
	// bundleClock replaces time.Now for the bundle's age and staleness
	// (tests only, not a flag: a test ages a bundle without waiting).
	bundleClock func() time.Time
	// Development mode only: the Kubernetes admission webhook's listener.
	webhookListen, webhookCert, webhookKey, webhookClientCA string
	webhookNamespaces                                       []string
}

func newServeCmd(logger func() *slog.Logger) *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the admission service (development mode without --config)",
		Long: `Run the admission service.

Without --config it runs in DEVELOPMENT MODE: the policy bundle embedded in the
binary, a bbolt ledger under --data-dir, the published development keys from
fixtures/keys, loopback only. With --config it reads a YAML configuration and
refuses the development keys.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.configFile != "" && (cmd.Flags().Changed("listen") || cmd.Flags().Changed("data-dir")) {
				return errors.New("--listen and --data-dir are for development mode; with --config set listen and data_dir in the file")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, o, logger())
		},
	}
	cmd.Flags().StringVar(&o.configFile, "config", "", "YAML configuration file (production mode)")
	cmd.Flags().StringVar(&o.listen, "listen", "127.0.0.1:8443", "listen address in development mode (loopback only)")
	cmd.Flags().StringVar(&o.dataDir, "data-dir", "./data", "data directory in development mode")
	cmd.Flags().StringVar(&o.ledgerDSN, "ledger-dsn", "",
		"development mode: PostgreSQL ledger DSN instead of bbolt under --data-dir (password via PGPASSWORD)")
	cmd.Flags().StringVar(&o.ledgerSchema, "ledger-schema", "", "development mode: PostgreSQL schema of the ledger (default itogate)")
	cmd.Flags().DurationVar(&o.ledgerTimeout, "ledger-timeout", 0,
		"development mode, with --ledger-dsn: bound on one PostgreSQL statement and on waiting for a pooled connection (default 5s each)")
	cmd.Flags().DurationVar(&o.policyDeadline, "policy-deadline", 0, "development mode: bound on one policy evaluation (default 250ms)")
	cmd.Flags().DurationVar(&o.requestTimeout, "request-timeout", 0, "development mode: bound on one request (default 5s)")
	cmd.Flags().IntVar(&o.maxEvaluations, "max-concurrent-evaluations", 0,
		"development mode: policy evaluations running at once (0: one per CPU; -1: no bound); up to 64 per slot "+
			"wait at most --max-queue-wait, then 503 ADMISSION_OVERLOADED (the queue's length is set in --config: limits.*)")
	cmd.Flags().DurationVar(&o.maxQueueWait, "max-queue-wait", 0,
		"development mode: bound on an admission's wait for an evaluation slot, beyond which it is answered "+
			"503 ADMISSION_OVERLOADED (default 1s); under sustained overload it sets the latency of the admissions served")
	cmd.Flags().StringVar(&o.shadowFile, "shadow-bundle-file", "",
		"development mode: a signed candidate bundle evaluated beside the enforced one, never enforced")
	cmd.Flags().StringVar(&o.bundleFile, "bundle-file", "",
		"development mode: enforce this signed bundle (make bundle), verified with the development bundle key")
	cmd.Flags().StringVar(&o.bundleURL, "bundle-url", "",
		"development mode: poll this bundle server URL for signed bundles, verified with the development bundle key")
	cmd.Flags().DurationVar(&o.bundlePoll, "bundle-poll-interval", 0, "development mode: how often --bundle-file/--bundle-url is polled (default 5s)")
	cmd.Flags().DurationVar(&o.bundleMaxAge, "bundle-max-age", 0, "development mode: stop enforcing a bundle built longer ago than this")
	cmd.Flags().StringVar(&o.webhookListen, "webhook-listen", "", "development mode: serve the Kubernetes admission webhook (TLS) on this loopback address")
	cmd.Flags().StringVar(&o.webhookCert, "webhook-cert-file", "", "development mode: the webhook's serving certificate (PEM)")
	cmd.Flags().StringVar(&o.webhookKey, "webhook-key-file", "", "development mode: the webhook's serving key (PEM)")
	cmd.Flags().StringVar(&o.webhookClientCA, "webhook-client-ca-file", "", "development mode: require apiserver client certificates signed by this CA")
	cmd.Flags().StringArrayVar(&o.webhookNamespaces, "webhook-namespace", nil, "development mode: NAMESPACE=ACCOUNT under the webhook's control (repeatable)")
	return cmd
}

func runServe(ctx context.Context, o *serveOptions, log *slog.Logger) error {
	var (
		cfg config.Config
		ts  *trust.Set
		err error
	)
	if o.configFile == "" {
		cfg = config.Dev(o.listen, o.dataDir)
		if err := cfg.LoopbackOnly(); err != nil {
			return err
		}
		if o.ledgerDSN != "" {
			cfg.Ledger.Driver, cfg.Ledger.DSN, cfg.Ledger.Schema = config.DriverPostgres, o.ledgerDSN, o.ledgerSchema
		}
		if o.ledgerTimeout != 0 {
			if o.ledgerDSN == "" || o.ledgerTimeout < 0 {
				return errors.New("--ledger-timeout needs --ledger-dsn and a positive duration")
			}
			cfg.Ledger.StatementTimeout, cfg.Ledger.AcquireTimeout = config.Duration(o.ledgerTimeout), config.Duration(o.ledgerTimeout)
		}
		if o.policyDeadline > 0 {
			cfg.Policy.Deadline = config.Duration(o.policyDeadline)
		}
		if o.requestTimeout > 0 {
			cfg.Limits.RequestTimeout = config.Duration(o.requestTimeout)
		}
		if o.maxEvaluations < -1 {
			return errors.New("--max-concurrent-evaluations must be -1 (no bound), 0 (one per CPU) or positive")
		}
		cfg.Limits.MaxConcurrentEvaluations = o.maxEvaluations
		if o.maxQueueWait < 0 {
			return errors.New("--max-queue-wait must not be negative")
		}
		cfg.Limits.MaxQueueWait = config.Duration(o.maxQueueWait)
		if o.bundleFile != "" || o.bundleURL != "" {
			if o.bundlePoll == 0 {
				o.bundlePoll = 5 * time.Second
			}
			cfg.Policy.Bundle = &config.Bundle{File: o.bundleFile, URL: o.bundleURL,
				PollInterval: config.Duration(o.bundlePoll), MaxAge: config.Duration(o.bundleMaxAge)}
		}
		if o.shadowFile != "" {
			cfg.Policy.Shadow = &config.Bundle{File: o.shadowFile, PollInterval: config.Duration(5 * time.Second)}
		}
		cfg.Webhook, err = devWebhook(o)
		if err == nil {
			ts, err = trust.Dev()
		}
		if err == nil && cfg.Webhook != nil {
			dt := trust.DevTicketsConfig()
			cfg.Tickets = &dt
		}
	} else {
		if o.ledgerDSN != "" || o.ledgerSchema != "" || o.ledgerTimeout != 0 || o.policyDeadline != 0 || o.requestTimeout != 0 || o.maxEvaluations != 0 || o.maxQueueWait != 0 ||
			o.bundleFile != "" || o.bundleURL != "" || o.bundlePoll != 0 || o.bundleMaxAge != 0 || o.shadowFile != "" {
			return errors.New("--ledger-dsn, --ledger-schema, --ledger-timeout, --policy-deadline, --request-timeout, --max-concurrent-evaluations, --max-queue-wait and --bundle-* are for development mode; set them in --config")
		}
		cfg, err = config.Load(o.configFile)
		if err != nil {
			return err
		}
		ts, err = trust.FromConfig(cfg.Trust)
		if err == nil && cfg.Tickets != nil {
			err = ts.LoadTickets(*cfg.Tickets)
		}
		if o.webhookListen != "" || o.webhookCert != "" || o.webhookKey != "" || o.webhookClientCA != "" || len(o.webhookNamespaces) > 0 {
			err = errors.New("--webhook-* flags are for development mode; set the webhook section in --config")
		}
	}
	if err != nil {
		return err
	}

	// data_dir holds the default ledger file and decision log; create it for
	// the owner only (it is the same with a PostgreSQL ledger: the decision
	// log defaults to it).
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return fmt.Errorf("data_dir: %w", err)
		}
	}

	metrics := server.NewMetrics()
	bundles, err := startBundles(ctx, cfg, metrics, log, o.bundleClock)
	if err != nil {
		return err
	}

	store, ledgerDesc, err := openLedger(ctx, cfg)
	if err != nil {
		return err
	}
	defer store.Close()
	defer startSweeper(ctx, store, cfg.Ledger.EffectiveSweepInterval(), log)()

	dlog, closeLog, err := openDecisionLog(cfg.DecisionLogPath(), metrics)
	if err != nil {
		return err
	}
	defer closeLog()

	shadow, err := startShadow(ctx, cfg, log)
	if err != nil {
		return err
	}
	evals := evaluations(cfg.Limits)
	var evalAuthority admission.TokenVerifier // stays a nil interface without trust.evals
	if ts.Evals != nil {
		evalAuthority = ts.Evals
	}
	svc, err := admission.New(admission.Options{
		Entitlement: ts.Entitlement, Confirmation: ts.Confirmation, Manifests: ts.Manifests, Evals: evalAuthority,
		Ledger: store, Policy: bundles.Active, Logger: log, DecisionLog: dlog,
		OnLedgerError: metrics.LedgerError,
		OnRunGPUs:     metrics.RunGPUs,
		Evaluations:   evals,
		Shadow:        shadow,
		Tickets:       ticketSigner(ts),
		OnShadow: func(r admission.ShadowResult) {
			metrics.Shadow(r.Kind)
			if !r.Agree && r.Kind != "skipped" {
				log.Warn("shadow bundle disagrees", "decision_id", r.DecisionID, "kind", r.Kind,
					"enforced_revision", r.EnforcedRevision, "shadow_revision", r.ShadowRevision,
					"enforced_codes", r.EnforcedCodes, "shadow_codes", r.ShadowCodes)
			}
		},
	})
	if err != nil {
		return err
	}
	metrics.Evaluations(svc.InFlight)
	metrics.VerificationCaches(ts.Callers, ts.Depositors, ts.Entitlement, ts.Confirmation)
	var revokers admission.TokenVerifier
	if ts.Revokers != nil { // a nil *TokenVerifier in the interface would not read as "none"
		revokers = ts.Revokers
	}
	handler, err := server.New(server.Options{
		Admission: svc, Callers: ts.Callers, Depositors: ts.Depositors, Revokers: revokers,
		Ready: func(ctx context.Context) error {
			if err := bundles.Ready(); err != nil {
				return err
			}
			if err := store.Ping(ctx); err != nil {
				return errors.New("ledger unreachable")
			}
			return nil
		},
		MaxBodyBytes: cfg.Limits.MaxBodyBytes, RequestTimeout: time.Duration(cfg.Limits.RequestTimeout),
		Metrics: metrics, Logger: log, TicketJWKS: ticketJWKS(ts),
	})
	if err != nil {
		return err
	}

	if cfg.Webhook != nil {
		leeway := config.DefaultLeeway
		if cfg.Tickets != nil {
			leeway = cfg.Tickets.EffectiveLeeway()
		}
		stopWebhook, err := startWebhook(ctx, cfg.Webhook, ts, leeway, store, bundles, metrics, log)
		if err != nil {
			return err
		}
		defer stopWebhook()
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	if cfg.Dev {
		log.Warn("DEVELOPMENT MODE: embedded policy bundle (unless --bundle-file/--bundle-url), PUBLISHED development keys from fixtures/keys, " +
			"loopback only. Anyone can mint tokens these keys accept. Never use this mode in production; pass --config.")
		log.Warn("DEVELOPMENT MODE: admission tickets are signed with the PUBLISHED development ticket key dev-ticket-1 " +
			"(fixtures/keys): a ticket from this server proves nothing to a workload boundary")
	} else if cfg.Tickets == nil {
		log.Warn("tickets: no tickets section: allowed admissions carry no admission ticket and GET /v1/tickets/jwks answers 404")
	}
	info, _ := bundles.Info()
	log.Info("itogate listening", "addr", ln.Addr().String(), "ledger", ledgerDesc,
		"bundle_revision", info.Revision, "bundle_digest", info.Digest, "development", cfg.Dev,
		"gc_percent", tuneGC(os.Getenv), "evaluation_slots", evals.Slots, "evaluation_queue", evals.Queue,
		"evaluation_queue_wait", evals.Wait.String())

	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       time.Duration(cfg.Limits.RequestTimeout) + 5*time.Second,
		WriteTimeout:      time.Duration(cfg.Limits.RequestTimeout) + 5*time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    server.MaxHeaderBytes,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

// ticketSigner is the admission's ticket signer, nil (not a typed nil)
// when tickets are off.
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

// openDecisionLog opens the decision log: "off", "stdout" or a file appended
// with mode 0600 (decisions name accounts and digests: not for everyone).
func openDecisionLog(dest string, m *server.Metrics) (*decisionlog.Logger, func(), error) {
	opts := decisionlog.Options{OnDrop: m.DecisionLogDropped}
	switch dest {
	case "off":
		return nil, func() {}, nil
	case "stdout":
		l := decisionlog.New(os.Stdout, opts)
		return l, l.Close, nil
	}
	f, err := os.OpenFile(dest, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("decision log: %w (create its directory for the user itogate runs as, or set decision_log: stdout or off)", err)
	}
	l := decisionlog.New(f, opts)
	return l, func() { l.Close(); f.Close() }, nil
}

// startBundles loads the policy bundle and keeps polling its source (design
// §6). The embedded bundle must load; a file or bundle server that fails at
// start leaves the service not ready (503 POLICY_NOT_READY, /readyz fails)
// while polling continues.
func startBundles(ctx context.Context, cfg config.Config, m *server.Metrics, log *slog.Logger, now func() time.Time) (*bundle.Manager, error) {
	opts, err := bundle.FromConfig(cfg.Policy, policies.Bundle(), cfg.Dev)
	if err != nil {
		return nil, err
	}
	opts.Logger, opts.Observer, opts.Now = log, m, now
	mgr, err := bundle.NewManager(opts)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Policy.Bundle == nil && !cfg.Dev:
		log.Warn("policy: no policy.bundle configured: enforcing the UNSIGNED bundle embedded in this binary " +
			"(revision from its digest, no max age). Configure a signed bundle; see bundles/README.md.")
	case cfg.Policy.Bundle != nil && cfg.Dev && len(cfg.Policy.Bundle.VerificationKeys) == 0:
		log.Warn("policy: verifying bundles with the PUBLISHED development bundle key (fixtures/keys); production refuses it")
	}
	if cfg.Policy.Bundle != nil && cfg.Policy.Bundle.MaxAge == 0 && !cfg.Dev {
		log.Warn("policy: policy.bundle.max_age is not set: a bundle is enforced however old it is")
	}
	if err := mgr.Load(ctx); err != nil {
		if cfg.Policy.Bundle == nil {
			return nil, err
		}
		log.Error("policy: no bundle active yet: not ready, every admission is denied (POLICY_NOT_READY) until one verifies",
			"source", opts.Source.String(), "err", err.Error())
	}
	if cfg.Policy.Bundle != nil {
		go mgr.Run(ctx)
	}
	return mgr, nil
}

// startShadow loads policy.shadow, the candidate bundle evaluated beside the
// enforced one, with the same verification as the enforced bundle. It
// returns nil when none is configured; a candidate that fails to load only
// means no comparisons until one verifies.
func startShadow(ctx context.Context, cfg config.Config, log *slog.Logger) (func() admission.Decider, error) {
	if cfg.Policy.Shadow == nil {
		return nil, nil
	}
	opts, err := bundle.FromConfig(config.Policy{Bundle: cfg.Policy.Shadow, Deadline: cfg.Policy.Deadline},
		policies.Bundle(), cfg.Dev)
	if err != nil {
		return nil, fmt.Errorf("policy.shadow: %w", err)
	}
	opts.Logger = log
	mgr, err := bundle.NewManager(opts)
	if err != nil {
		return nil, fmt.Errorf("policy.shadow: %w", err)
	}
	if err := mgr.Load(ctx); err != nil {
		log.Warn("policy.shadow: no candidate bundle active yet", "err", err.Error())
	}
	go mgr.Run(ctx)
	log.Info("policy.shadow: evaluating a candidate bundle beside the enforced one (never enforced)")
	return mgr.Active, nil
}

// evaluations turns the limits into the admission's evaluation bound, with
// admission's defaults filled in (for the start-up log).
func evaluations(l config.Limits) admission.Evaluations {
	slots, queue, wait := l.Evaluations(runtime.GOMAXPROCS(0))
	return admission.Evaluations{Slots: slots, Queue: queue, Wait: wait}.Effective()
}

// defaultGCPercent is serve's garbage-collector target when GOGC is not set.
// An admission allocates ~0.6 MB, nearly all of it garbage once answered,
// over a small live heap: at Go's default (100) the collector ran every few
// admissions and took ~13 % more CPU per admission than at 200
// (BenchmarkAdmitAllow, docs/performance.md), for a heap target that stays
// well inside the memory budget.
const defaultGCPercent = 200

// tuneGC applies defaultGCPercent unless the operator set GOGC, and returns
// the percent in force (-1: collection off, as GOGC=off).
func tuneGC(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		p := debug.SetGCPercent(100)
		debug.SetGCPercent(p)
		return p
	}
	debug.SetGCPercent(defaultGCPercent)
	return defaultGCPercent
}
