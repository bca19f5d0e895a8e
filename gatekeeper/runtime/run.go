package runtime

import (
	"context"
	"net"
	"runtime/metrics"
	"time"

	"github.com/itocompute/itogate/gatekeeper/version"
)

// shutdownGrace bounds the graceful shutdown of each listener: requests in
// flight get this long to finish.
const shutdownGrace = 10 * time.Second

// Run serves the API on cfg.Listen (HTTPS with a tls section) and the
// webhook on webhook.listen
// until ctx ends, then logs "shutting down" and shuts the listeners down
// gracefully, giving requests in flight up to 10 s. It returns the
// listener's error, or the shutdown's. Close the Runtime after Run.
func (rt *Runtime) Run(ctx context.Context) error {
	stopWebhook, err := rt.serveWebhook(ctx)
	if err != nil {
		return err
	}
	defer stopWebhook()
	ln, err := net.Listen("tcp", rt.cfg.Listen)
	if err != nil {
		return err
	}
	rt.logStart(ln.Addr())
	srv := rt.HTTPServer(rt.handler)
	errc := make(chan error, 1)
	if rt.apiTLS != nil {
		srv.TLSConfig = rt.apiTLS
		go func() { errc <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- srv.Serve(ln) }()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	rt.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	return srv.Shutdown(sctx)
}

// logStart writes the start-up lines: development mode's warnings (or
// production's without tickets) and "itogate listening" with what is
// enforced.
func (rt *Runtime) logStart(addr net.Addr) {
	log, cfg := rt.log, rt.cfg
	if cfg.Dev {
		log.Warn("DEVELOPMENT MODE: embedded policy bundle (unless --bundle-file/--bundle-url), PUBLISHED development keys from fixtures/keys, " +
			"loopback only. Anyone can mint tokens these keys accept. Never use this mode in production; pass --config.")
		log.Warn("DEVELOPMENT MODE: admission tickets are signed with the PUBLISHED development ticket key dev-ticket-1 " +
			"(fixtures/keys): a ticket from this server proves nothing to a workload boundary")
	} else if cfg.Tickets == nil {
		log.Warn("tickets: no tickets section: allowed admissions carry no admission ticket and GET /v1/tickets/jwks answers 404")
	}
	switch {
	case rt.dlog == nil:
		log.Warn("decision_log: off: admissions leave no audit record; allows are committed without one")
	case !rt.dlog.Required():
		log.Warn("DEVELOPMENT MODE: the decision log is best effort: a line that cannot be written is dropped and " +
			"counted (itogate_decision_log_dropped_total), and the allow is committed anyway")
	}
	info, _ := rt.bundles.Info()
	bi := version.Get()
	log.Info("itogate listening", "addr", addr.String(), "tls", rt.apiTLS != nil, "version", bi.Version, "commit", bi.Commit,
		"ledger", rt.ledgerDesc, "ledger_schema", rt.ledgerSchema(),
		"bundle_revision", info.Revision, "bundle_digest", info.Digest, "development", cfg.Dev,
		"gc_percent", gcPercent(), "evaluation_slots", rt.evals.Slots, "evaluation_queue", rt.evals.Queue,
		"evaluation_queue_wait", rt.evals.Wait.String(), "decision_log", rt.cfg.DecisionLogPath(),
		"decision_log_required", rt.dlog != nil && rt.dlog.Required())
}

// gcPercent is the garbage collector's target in force (GOGC or
// debug.SetGCPercent; -1: collection off), read without changing it.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int(int64(s[0].Value.Uint64()))
}
