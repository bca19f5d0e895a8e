package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/verify"
	"github.com/itocompute/itogate/gatekeeper/webhook"
)

// buildWebhook builds g's admission webhook router, over g's ticket keys
// and namespace bindings; the server's metrics, served on the API
// listener's /metrics, are told of every review.
func (rt *Runtime) buildWebhook(g *generation) error {
	w, ts, store := g.cfg.Webhook, g.trust, rt.store
	if ts.Tickets == nil {
		return errors.New("webhook: needs tickets (the tickets section)")
	}
	workloads, ok := store.(ledger.Workloads)
	if !ok {
		return fmt.Errorf("webhook: the %T ledger keeps no workload bindings", store)
	}
	tv, err := ticketVerifier(g)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	h, err := webhook.New(webhook.Options{
		Tickets: tv, Runs: webhook.LedgerRuns{Store: store}, Workloads: workloads,
		Policy: func() webhook.Decider {
			if e := rt.bundles.Engine(); e != nil {
				return e
			}
			return nil
		},
		Namespaces: w.Namespaces, Timeout: time.Duration(w.Timeout), MaxReviewBytes: w.MaxReviewBytes,
		Now: rt.opts.Now, Logger: rt.log, Observer: rt.metrics,
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/validate", h)
	mux.Handle("/validate-warn", h.Warn())
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write([]byte("ok\n")) })
	g.webhook = mux
	return nil
}

// openWebhookTLS reads the webhook's serving certificate (re-read when it
// changes, not on reload) and its client CA.
func (rt *Runtime) openWebhookTLS() error {
	w := rt.cfg.Webhook
	certs, err := webhook.NewCertReloader(w.CertFile, w.KeyFile, rt.log)
	if err != nil {
		return err
	}
	rt.webhookTLS, err = webhook.TLSConfig(certs, w.ClientCAFile)
	return err
}

// serveWebhook runs the webhook's own TLS listener until the returned
// function shuts it down (a no-op without a webhook).
func (rt *Runtime) serveWebhook(ctx context.Context) (stop func(), err error) {
	if rt.webhook == nil {
		return func() {}, nil
	}
	w := rt.cfg.Webhook
	ln, err := net.Listen("tcp", w.Listen)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	srv := webhook.NewServer(rt.webhook, rt.webhookTLS, w.HTTP2, rt.log)
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			rt.log.Error("webhook listener stopped", "err", err)
		}
	}()
	rt.log.Info("webhook listening (TLS)", "addr", ln.Addr().String(), "client_ca", w.ClientCAFile != "",
		"namespaces", len(rt.gen.Load().cfg.Webhook.Namespaces))
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

// ticketVerifier verifies the tickets g signs (its published key set),
// with tickets.leeway (verify.DefaultLeeway unless set): the webhook, the
// renewal and the online check use the same.
func ticketVerifier(g *generation) (*ticket.Verifier, error) {
	ts := g.trust
	var leeway time.Duration
	if g.cfg.Tickets != nil {
		leeway = time.Duration(g.cfg.Tickets.Leeway)
	}
	return ticket.NewVerifier(ticket.VerifierOptions{
		Issuer: ts.Tickets.Issuer(), Audience: ts.Tickets.Audience(), Keys: ts.Tickets.KeySet(),
		Leeway: leeway, CacheEntries: verify.CacheEntriesFor(verify.PurposeTicket),
	})
}
