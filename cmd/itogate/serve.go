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
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/ledger/bolt"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/server"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/policies"
)

type serveOptions struct {
	configFile string
	listen     string
	dataDir    string
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
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, o, logger())
		},
	}
	cmd.Flags().StringVar(&o.configFile, "config", "", "YAML configuration file (production mode)")
	cmd.Flags().StringVar(&o.listen, "listen", "127.0.0.1:8443", "listen address in development mode (loopback only)")
	cmd.Flags().StringVar(&o.dataDir, "data-dir", "./data", "data directory in development mode")
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
		ts, err = trust.Dev()
	} else {
		cfg, err = config.Load(o.configFile)
		if err != nil {
			return err
		}
		ts, err = trust.FromConfig(cfg.Trust)
	}
	if err != nil {
		return err
	}

	bundleFS := policies.Bundle()
	if cfg.Policy.BundleDir != "" {
		bundleFS = os.DirFS(cfg.Policy.BundleDir)
	}
	engine, err := policy.New(ctx, policy.Options{Bundle: bundleFS, Deadline: time.Duration(cfg.Policy.Deadline)})
	if err != nil {
		return err
	}

	if err := os.MkdirAll(filepath.Dir(cfg.LedgerPath()), 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	store, err := bolt.Open(cfg.LedgerPath(), bolt.Options{})
	if err != nil {
		return err
	}
	defer store.Close()

	metrics := server.NewMetrics()
	dlog, closeLog, err := openDecisionLog(cfg.DecisionLogPath(), metrics)
	if err != nil {
		return err
	}
	defer closeLog()

	svc, err := admission.New(admission.Options{
		Entitlement: ts.Entitlement, Confirmation: ts.Confirmation, Manifests: ts.Manifests,
		Ledger: store, Policy: func() admission.Decider { return engine }, Logger: log, DecisionLog: dlog,
		OnLedgerError: metrics.LedgerError,
	})
	if err != nil {
		return err
	}
	metrics.SetBundle(engine.Revision(), engine.Digest())
	handler, err := server.New(server.Options{
		Admission: svc, Callers: ts.Callers, Depositors: ts.Depositors,
		Ready: func(ctx context.Context) error {
			if err := store.Ping(ctx); err != nil {
				return errors.New("ledger unreachable")
			}
			return nil
		},
		MaxBodyBytes: cfg.Limits.MaxBodyBytes, RequestTimeout: time.Duration(cfg.Limits.RequestTimeout),
		Metrics: metrics, Logger: log,
	})
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	if cfg.Dev {
		log.Warn("DEVELOPMENT MODE: embedded policy bundle, PUBLISHED development keys from fixtures/keys, " +
			"loopback only. Anyone can mint tokens these keys accept. Never use this mode in production; pass --config.")
	}
	log.Info("itogate listening", "addr", ln.Addr().String(), "ledger", cfg.LedgerPath(),
		"bundle_revision", engine.Revision(), "bundle_digest", engine.Digest(), "development", cfg.Dev)

	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       time.Duration(cfg.Limits.RequestTimeout) + 5*time.Second,
		WriteTimeout:      time.Duration(cfg.Limits.RequestTimeout) + 5*time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
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
		return nil, nil, fmt.Errorf("decision log: %w", err)
	}
	l := decisionlog.New(f, opts)
	return l, func() { l.Close(); f.Close() }, nil
}
