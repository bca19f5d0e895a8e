package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/verify"
	"github.com/itocompute/itogate/gatekeeper/webhook"
)

// devWebhook turns serve's development flags into a webhook section.
func devWebhook(o *serveOptions) (*config.Webhook, error) {
	if o.webhookListen == "" {
		if o.webhookCert != "" || o.webhookKey != "" || o.webhookClientCA != "" || len(o.webhookNamespaces) > 0 {
			return nil, errors.New("--webhook-* flags need --webhook-listen")
		}
		return nil, nil
	}
	w := &config.Webhook{Listen: o.webhookListen, CertFile: o.webhookCert, KeyFile: o.webhookKey,
		ClientCAFile: o.webhookClientCA, Namespaces: map[string]string{}}
	for _, nv := range o.webhookNamespaces {
		ns, acct, ok := strings.Cut(nv, "=")
		if !ok || ns == "" || acct == "" {
			return nil, fmt.Errorf("--webhook-namespace %q: want NAMESPACE=ACCOUNT", nv)
		}
		w.Namespaces[ns] = acct
	}
	host, _, err := net.SplitHostPort(w.Listen)
	if err != nil {
		return nil, fmt.Errorf("--webhook-listen: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, errors.New("--webhook-listen: development mode listens on loopback only")
	}
	return w, nil
}

// startWebhook runs the admission webhook's own TLS listener until ctx
// ends; obs (the server's metrics, served on the API listener's /metrics)
// is told of every review. It returns a function that shuts it down.
func startWebhook(ctx context.Context, w *config.Webhook, ts *trust.Set, leeway time.Duration, store ledger.Store,
	bundles *bundle.Manager, obs webhook.Observer, log *slog.Logger) (func(), error) {
	if ts.Tickets == nil {
		return nil, errors.New("webhook: needs tickets (the tickets section)")
	}
	workloads, ok := store.(ledger.Workloads)
	if !ok {
		return nil, fmt.Errorf("webhook: the %T ledger keeps no workload bindings", store)
	}
	tv, err := ticket.NewVerifier(ticket.VerifierOptions{
		Issuer: ts.Tickets.Issuer(), Audience: ts.Tickets.Audience(), Keys: ts.Tickets.KeySet(),
		Leeway: leeway, CacheEntries: verify.CacheEntriesFor(verify.PurposeTicket),
	})
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	h, err := webhook.New(webhook.Options{
		Tickets: tv, Runs: webhook.LedgerRuns{Store: store}, Workloads: workloads,
		Policy: func() webhook.Decider {
			if e := bundles.Engine(); e != nil {
				return e
			}
			return nil
		},
		Namespaces: w.Namespaces, Timeout: w.EffectiveTimeout(), Logger: log, Observer: obs,
	})
	if err != nil {
		return nil, err
	}
	certs, err := webhook.NewCertReloader(w.CertFile, w.KeyFile, log)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := webhook.TLSConfig(certs, w.ClientCAFile)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/validate", h)
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write([]byte("ok\n")) })
	ln, err := net.Listen("tcp", w.Listen)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	srv := &http.Server{
		Handler: mux, TLSConfig: tlsCfg,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		IdleTimeout: 90 * time.Second, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("webhook listener stopped", "err", err)
		}
	}()
	log.Info("webhook listening (TLS)", "addr", ln.Addr().String(), "client_ca", w.ClientCAFile != "",
		"namespaces", len(w.Namespaces))
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}
