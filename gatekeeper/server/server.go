// Package server is itogate's HTTP edge: routing, limits, caller
// authentication, strict request decoding, envelopes and metrics. Decisions
// are made by the admission package; this package only translates.
package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/strictjson"
)

// MaxHeaderBytes bounds the request headers `itogate serve` accepts (its
// http.Server.MaxHeaderBytes). A bearer token above the token size limit
// (verify.DefaultMaxTokenBytes) but within this bound reaches the handler and
// is refused with a coded 401; larger headers are refused by net/http itself
// with a bare 431 before any handler runs, so nothing parses them.
const MaxHeaderBytes = 64 << 10

// Defaults of Options.
const (
	// DefaultMaxBodyBytes bounds a request body: a 1 MiB manifest
	// base64-encoded plus tokens (limits.max_body_bytes unset).
	DefaultMaxBodyBytes = 2 << 20
	// DefaultRequestTimeout bounds one request, body to response
	// (limits.request_timeout unset).
	DefaultRequestTimeout = 5 * time.Second
)

// Options wire a Server.
type Options struct {
	Admission *admission.Service
	// Callers verifies callers' bearer tokens (POST/GET admissions).
	Callers admission.TokenVerifier
	// Depositors verifies the confirmation authority's bearer tokens
	// (POST /v1/confirmations and /v1/confirmations/revocations); a caller
	// token never passes it.
	Depositors admission.TokenVerifier
	// Revokers verifies the entitlement issuer's revocation identity (POST
	// /v1/revocations). Optional: nil refuses every such revocation (401).
	Revokers admission.TokenVerifier
	// Schedulers verifies the schedulers' identity (POST
	// /v1/tickets/verify). Optional: nil refuses every such call (401).
	Schedulers admission.TokenVerifier
	// Ready reports whether a verified bundle is active and the ledger answers.
	Ready func(ctx context.Context) error
	// ReadyInfo is added to /readyz's data when ready (the version, the
	// ledger schema).
	ReadyInfo map[string]any
	// MaxBodyBytes bounds request bodies (default DefaultMaxBodyBytes);
	// RequestTimeout bounds a request (default DefaultRequestTimeout).
	MaxBodyBytes   int64
	RequestTimeout time.Duration
	Metrics        *Metrics
	Logger         *slog.Logger
	Now            func() time.Time
	// TicketJWKS is the ticket public key set served at GET
	// /v1/tickets/jwks; nil when tickets are not configured (404
	// TICKETS_DISABLED).
	TicketJWKS []byte
}

// New returns the router.
func New(opts Options) (http.Handler, error) {
	if opts.Admission == nil || opts.Callers == nil || opts.Depositors == nil || opts.Ready == nil || opts.Metrics == nil {
		return nil, errors.New("server: incomplete options")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	opts.RequestTimeout = timeoutOrDefault(opts.RequestTimeout)
	s := &srv{opts: opts}
	r := chi.NewRouter()
	r.Use(requestID, s.recoverer, s.observe)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, Envelope{OK: true, Data: map[string]any{"status": "alive"}})
	})
	r.Get("/readyz", s.readyz)
	r.Method(http.MethodGet, "/metrics", opts.Metrics.Handler())
	r.Route("/v1", func(r chi.Router) {
		r.Use(s.deadline)
		callers := s.authenticate("caller", opts.Callers, api.CodeCallerUnauthenticated, true)
		depositors := s.authenticate("depositor", opts.Depositors, api.CodeDepositorUnauthorized, false)
		r.With(s.limitBody, s.requireJSON, callers).Post("/admissions", s.postAdmission)
		r.With(callers).Get("/admissions/{idempotency_key}", s.getAdmission)
		r.With(s.limitBody, s.requireJSON, callers).Post("/plans", s.postPlan)
		r.With(callers).Get("/runs/{run_id}", s.getRun)
		r.With(callers).Get("/runs", s.listRuns)
		r.With(callers).Post("/runs/{run_id}/ticket", s.renewTicket)
		// The eval authority's report is its own credential (trust.evals):
		// no bearer token is read, so no other purpose's identity can post.
		r.With(s.limitBody, s.requireJSON).Post("/runs/{run_id}/eval-reports", s.postEvalReport)
		r.With(s.limitBody, s.requireJSON, depositors).Post("/confirmations", s.postConfirmation)
		r.With(s.limitBody, s.requireJSON, depositors).Post("/confirmations/revocations", s.postConfirmationRevocation)
		revokers := s.refuse(api.CodeRevokerUnauthenticated, "no revoker identity is configured (trust.revokers)")
		if opts.Revokers != nil {
			revokers = s.authenticate("revoker", opts.Revokers, api.CodeRevokerUnauthenticated, false)
		}
		r.With(s.limitBody, s.requireJSON, revokers).Post("/revocations", s.postRevocation)
		r.Get("/tickets/jwks", s.ticketJWKS)
		schedulers := s.refuse(api.CodeSchedulerUnauthenticated, "no scheduler identity is configured (trust.schedulers)")
		if opts.Schedulers != nil {
			schedulers = s.authenticate("scheduler", opts.Schedulers, api.CodeSchedulerUnauthenticated, false)
		}
		r.With(s.limitBody, s.requireJSON, schedulers).Post("/tickets/verify", s.checkTicket)
	})
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, api.CodeRouteNotFound, "no such route")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, api.CodeMethodNotAllowed, "method not allowed on this route")
	})
	return r, nil
}

type srv struct{ opts Options }

func timeoutOrDefault(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultRequestTimeout
	}
	return d
}

// HTTPServer is the http.Server that serves h, the router of New (or a
// wrapper of it), as `itogate serve` does: headers within MaxHeaderBytes
// and within requestTimeout (default DefaultRequestTimeout, 5 s: the one
// request bound, so a test that sets a bound no machine hits sets it for
// the headers too), the whole request and response within requestTimeout
// plus 5 s, so that the router's own deadline answers first, and idle
// connections closed after 60 s.
func HTTPServer(h http.Handler, requestTimeout time.Duration) *http.Server {
	slack := timeoutOrDefault(requestTimeout) + 5*time.Second
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: timeoutOrDefault(requestTimeout),
		ReadTimeout:       slack,
		WriteTimeout:      slack,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}

// ticketJWKS serves the ticket public keys as a bare JWKS (RFC 7517 §5),
// not an envelope: JWKS consumers (`itogate ticket verify --jwks`, OPA's
// io.jwt.decode_verify, any JOSE library) read it as is. Public keys only,
// no authentication; cacheable for five minutes, shorter than any rotation
// overlap (tickets.previous_jwks_file).
func (s *srv) ticketJWKS(w http.ResponseWriter, _ *http.Request) {
	if s.opts.TicketJWKS == nil {
		writeError(w, api.CodeTicketsDisabled, "tickets are not configured on this itogate")
		return
	}
	w.Header().Set("Content-Type", "application/jwk-set+json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(s.opts.TicketJWKS)
}

type ctxKey struct{}

func callerFrom(ctx context.Context) admission.Caller {
	c, _ := ctx.Value(ctxKey{}).(admission.Caller)
	return c
}

// authenticate verifies the bearer token with the given purpose's verifier.
// Identity only: the caller's account scopes idempotency keys and must match
// the tokens, but authorizes nothing by itself.
func (s *srv) authenticate(purpose string, v admission.TokenVerifier, code api.Code, needAccount bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := r.Header.Get("Authorization")
			const prefix = "bearer "
			if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="itogate"`)
				writeError(w, code, "a bearer token is required")
				return
			}
			claims, err := v.Verify([]byte(strings.TrimSpace(h[len(prefix):])), s.opts.Now())
			if err != nil {
				s.opts.Metrics.verifyFailure(purpose, err)
				// The verify error names purpose and kind only, never token bytes.
				// The route is the matched pattern, never the caller's path.
				s.opts.Logger.Warn("bearer token rejected", append([]any{"purpose", purpose,
					"route", chi.RouteContext(r.Context()).RoutePattern(), "err", err.Error()}, requestAttrs(r)...)...)
				w.Header().Set("WWW-Authenticate", `Bearer realm="itogate", error="invalid_token"`)
				writeError(w, code, "the bearer token was rejected")
				return
			}
			// The account scopes idempotency keys and must match the tokens'
			// sub; a token without one is no caller of ours (never fall back
			// to sub: an IdP subject is not an account).
			account, _ := claims.Raw["account"].(string)
			if account == "" && needAccount {
				s.opts.Logger.Warn("bearer token rejected", append([]any{"purpose", purpose, "reason", "no account claim",
					"key_id", claims.KeyID}, requestAttrs(r)...)...)
				w.Header().Set("WWW-Authenticate", `Bearer realm="itogate", error="invalid_token"`)
				writeError(w, code, "the bearer token carries no account claim")
				return
			}
			// The account keys the caller's admissions in the ledger: one the
			// ledger cannot hold (over-long, NUL) is refused here, alike on
			// every backend, instead of surfacing as a ledger fault.
			if p := ledger.IDProblem(account); needAccount && p != "" {
				s.opts.Logger.Warn("bearer token rejected", append([]any{"purpose", purpose, "reason", "account claim " + p,
					"key_id", claims.KeyID}, requestAttrs(r)...)...)
				w.Header().Set("WWW-Authenticate", `Bearer realm="itogate", error="invalid_token"`)
				writeError(w, code, "the bearer token's account claim "+p)
				return
			}
			if purpose == "caller" {
				// A key withdrawn from trust by a revocation answers like
				// an unknown key, with its own code: the client stops.
				if out, revoked := s.opts.Admission.CallerRevoked(r.Context(), claims.KeyID); revoked {
					s.opts.Logger.Warn("bearer token rejected", append([]any{"purpose", purpose, "reason", out.Code,
						"key_id", claims.KeyID}, requestAttrs(r)...)...)
					if out.HTTPStatus() == http.StatusUnauthorized {
						w.Header().Set("WWW-Authenticate", `Bearer realm="itogate", error="invalid_token"`)
					}
					writeOutcome(w, out)
					return
				}
			}
			c := admission.Caller{Subject: claims.Subject, Account: account, KeyID: claims.KeyID}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, c)))
		})
	}
}

// deadline bounds every /v1 request. Unlike chi's Timeout middleware it
// writes nothing itself: the pipeline sees the expired context and answers
// with its own coded deny (POLICY_TIMEOUT, LEDGER_UNAVAILABLE), so a timeout
// never produces a response without an envelope.
func (s *srv) deadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func (s *srv) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.opts.MaxBodyBytes {
			writeError(w, api.CodeRequestTooLarge,
				fmt.Sprintf("request body larger than %d bytes", s.opts.MaxBodyBytes))
			return
		}
		// The request deadline bounds reading the body too: a body that
		// stalls or trickles ends in a coded 408, not a handler parked on
		// the connection until the server's ReadTimeout (if any).
		if dl, ok := r.Context().Deadline(); ok {
			_ = http.NewResponseController(w).SetReadDeadline(dl)
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

func (s *srv) requireJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" || (params["charset"] != "" && !strings.EqualFold(params["charset"], "utf-8")) {
			writeError(w, api.CodeContentType, "Content-Type must be application/json")
			return
		}
		// Bodies are read as sent: a compressed one is an unsupported media
		// type, not malformed JSON (the header's value is not echoed).
		if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
			writeError(w, api.CodeContentType,
				"Content-Encoding is not supported: send the application/json body uncompressed")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *srv) postAdmission(w http.ResponseWriter, r *http.Request) {
	var req api.AdmissionRequest
	if !decode(w, r, &req) {
		return
	}
	out := s.opts.Admission.Admit(r.Context(), callerFrom(r.Context()), req)
	s.opts.Metrics.decision(out)
	if out.Cause != nil {
		s.opts.Metrics.verifyFailure("", out.Cause)
	}
	s.logDecision(r, out)
	writeOutcome(w, out)
}

// postPlan answers POST /v1/plans (admission.Service.Plan): read-only,
// nothing is logged as a decision.
func (s *srv) postPlan(w http.ResponseWriter, r *http.Request) {
	var req api.PlanRequest
	if !decode(w, r, &req) {
		return
	}
	writeOutcome(w, s.opts.Admission.Plan(r.Context(), callerFrom(r.Context()), req))
}

func (s *srv) getAdmission(w http.ResponseWriter, r *http.Request) {
	// The key is the route's last segment of the escaped path, decoded
	// exactly once: "qa%3Arun.1" from Python's quote or JavaScript's
	// encodeURIComponent is the key "qa:run.1". chi's own parameter cannot
	// be used: it is still encoded when the request needed a RawPath and
	// already decoded when not, so decoding it again would turn a literal
	// "%253A" into ":". The key's shape check then refuses whatever a
	// decoded %2F or %00 would smuggle.
	escaped := r.URL.EscapedPath()
	key, err := url.PathUnescape(escaped[strings.LastIndexByte(escaped, '/')+1:])
	if err != nil {
		writeError(w, api.CodeRequestInvalid, "idempotency_key: not a valid percent-encoded path segment")
		return
	}
	writeOutcome(w, s.opts.Admission.Status(r.Context(), callerFrom(r.Context()), key))
}

// getRun answers GET /v1/runs/{run_id} for the caller's account: the run's
// id is the route's last segment, decoded once (as getAdmission's key).
func (s *srv) getRun(w http.ResponseWriter, r *http.Request) {
	escaped := r.URL.EscapedPath()
	id, err := url.PathUnescape(escaped[strings.LastIndexByte(escaped, '/')+1:])
	if err != nil {
		writeError(w, api.CodeRequestInvalid, "run_id: not a valid percent-encoded path segment")
		return
	}
	writeOutcome(w, s.opts.Admission.RunStatus(r.Context(), callerFrom(r.Context()), id))
}

// renewTicket answers POST /v1/runs/{run_id}/ticket: a fresh ticket of the
// caller account's run while it may run. No body.
func (s *srv) renewTicket(w http.ResponseWriter, r *http.Request) {
	// As getRun: the escaped path's segment, decoded exactly once.
	escaped := strings.TrimSuffix(r.URL.EscapedPath(), "/ticket")
	id, err := url.PathUnescape(escaped[strings.LastIndexByte(escaped, '/')+1:])
	if err != nil {
		writeError(w, api.CodeRequestInvalid, "run_id: not a valid percent-encoded path segment")
		return
	}
	writeOutcome(w, s.opts.Admission.RenewTicket(r.Context(), callerFrom(r.Context()), id))
}

// postEvalReport answers POST /v1/runs/{run_id}/eval-reports: the eval
// authority's report for the run, posted directly (admission.Service.
// PostEvalReport). The report authenticates the post; the run id is the
// path's segment before /eval-reports, decoded once (as getRun).
func (s *srv) postEvalReport(w http.ResponseWriter, r *http.Request) {
	escaped := strings.TrimSuffix(r.URL.EscapedPath(), "/eval-reports")
	id, err := url.PathUnescape(escaped[strings.LastIndexByte(escaped, '/')+1:])
	if err != nil {
		writeError(w, api.CodeRequestInvalid, "run_id: not a valid percent-encoded path segment")
		return
	}
	var req api.EvalReportRequest
	if !decode(w, r, &req) {
		return
	}
	out := s.opts.Admission.PostEvalReport(r.Context(), id, req)
	if out.Cause != nil {
		s.opts.Metrics.verifyFailure("evals", out.Cause)
	}
	// The path is unauthenticated: only a run id's shape is logged.
	logged := "(not a run id)"
	if ledger.IsRunID(id) {
		logged = id
	}
	s.opts.Logger.Info("eval report", append(requestAttrs(r), "run_id", logged, "status", out.HTTPStatus(),
		"code", string(out.Code))...)
	writeOutcome(w, out)
}

// checkTicket answers POST /v1/tickets/verify for a scheduler: is the
// ticket's run live, and (with a job id) bind it to that one job.
func (s *srv) checkTicket(w http.ResponseWriter, r *http.Request) {
	var req api.TicketCheckRequest
	if !decode(w, r, &req) {
		return
	}
	writeOutcome(w, s.opts.Admission.CheckTicket(r.Context(), callerFrom(r.Context()), req))
}

// listRuns answers GET /v1/runs?booking_id=&state=&after=&limit= for the
// caller's account. Each parameter at most once; any other is refused.
func (s *srv) listRuns(w http.ResponseWriter, r *http.Request) {
	params, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, api.CodeRequestInvalid, "the query string does not parse")
		return
	}
	var q admission.RunQuery
	for name, vs := range params {
		if len(vs) != 1 {
			writeError(w, api.CodeRequestInvalid, "each query parameter at most once")
			return
		}
		switch v := vs[0]; name {
		case "booking_id":
			q.BookingID = v
		case "state":
			q.State = api.RunState(v)
		case "after":
			q.After = v
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				writeError(w, api.CodeRequestInvalid, "limit: 1 to 200")
				return
			}
			q.Limit = n
		default:
			writeError(w, api.CodeRequestInvalid, "unknown query parameter; booking_id, state, after and limit are")
			return
		}
	}
	writeOutcome(w, s.opts.Admission.ListRuns(r.Context(), callerFrom(r.Context()), q))
}

func (s *srv) postConfirmation(w http.ResponseWriter, r *http.Request) {
	var req api.DepositRequest
	if !decode(w, r, &req) {
		return
	}
	writeOutcome(w, s.opts.Admission.Deposit(r.Context(), req.ConfirmationToken))
}

// refuse answers every request with a 401 code (a route whose identity is
// not configured).
func (s *srv) refuse(code api.Code, msg string) func(http.Handler) http.Handler {
	return func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="itogate"`)
			writeError(w, code, msg)
		})
	}
}

// postConfirmationRevocation: the confirmation authority revokes a
// confirmation by ref (deposited) or by jti (deposited or not yet).
func (s *srv) postConfirmationRevocation(w http.ResponseWriter, r *http.Request) {
	var req api.ConfirmationRevocationRequest
	if !decode(w, r, &req) {
		return
	}
	who := callerFrom(r.Context())
	writeOutcome(w, s.opts.Admission.Revoke(r.Context(), admission.Revocation{
		Kind: ledger.RevokeConfirmation, Ref: req.Ref, Subject: req.JTI, ExpiresAt: req.ExpiresAt, Reason: req.Reason,
		By: who.Subject, KeyID: who.KeyID, Identity: "depositor",
	}))
}

// postRevocation: the entitlement issuer's revoker revokes an entitlement
// (by jti), a booking or a caller key.
func (s *srv) postRevocation(w http.ResponseWriter, r *http.Request) {
	var req api.RevocationRequest
	if !decode(w, r, &req) {
		return
	}
	who := callerFrom(r.Context())
	writeOutcome(w, s.opts.Admission.Revoke(r.Context(), admission.Revocation{
		Kind: ledger.RevocationKind(req.Kind), Subject: req.Subject, ExpiresAt: req.ExpiresAt, Reason: req.Reason,
		By: who.Subject, KeyID: who.KeyID, Identity: "revoker",
	}))
}

func (s *srv) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.opts.Ready(ctx); err != nil {
		writeError(w, api.CodeNotReady, err.Error())
		return
	}
	data := map[string]any{"status": "ready"}
	for k, v := range s.opts.ReadyInfo {
		data[k] = v
	}
	writeJSON(w, http.StatusOK, Envelope{OK: true, Data: data})
}

// decode reads the whole (size-limited) body as one strict JSON object into
// the wire type dst (strictjson.Into: its json tags, matched exactly). It
// answers the coded error itself and returns false when the body is refused.
func decode(w http.ResponseWriter, r *http.Request, dst any) bool {
	buf, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			writeError(w, api.CodeRequestTooLarge, "request body larger than "+strconv.FormatInt(mbe.Limit, 10)+" bytes")
		case errors.Is(err, os.ErrDeadlineExceeded):
			writeError(w, api.CodeRequestTimeout, "the request body did not arrive before the request deadline")
		default:
			writeError(w, api.CodeRequestInvalid, "could not read the request body")
		}
		return false
	}
	if bytes.HasPrefix(buf, []byte{0x1f, 0x8b}) { // gzip's magic number, sent without Content-Encoding
		writeError(w, api.CodeContentType, "the body is gzip-compressed: send the application/json body uncompressed")
		return false
	}
	obj, err := strictjson.DecodeObject(buf, 8)
	if err == nil {
		err = strictjson.Into(obj, dst, api.MaxEvalReports)
	}
	var b64 *strictjson.Base64Error
	switch {
	case errors.As(err, &b64) && b64.Field == "manifest":
		writeError(w, api.CodeManifestEncoding, err.Error())
		return false
	case err != nil:
		writeError(w, api.CodeRequestInvalid, err.Error())
		return false
	}
	return true
}

func (s *srv) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if rec := recover(); rec != nil {
				if rec == http.ErrAbortHandler {
					panic(rec)
				}
				s.opts.Logger.Error("panic in handler", append(requestAttrs(r), "panic", decisionlog.Redact(fmt.Sprint(rec)))...)
				writeError(w, api.CodeInternal, "internal error; denied")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func (s *srv) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := chi.RouteContext(r.Context()).RoutePattern()
		s.opts.Metrics.request(r.Method, route, ww.Status(), time.Since(start))
	})
}

// logDecision writes one line per admission: ids, digests and codes only.
func (s *srv) logDecision(r *http.Request, o admission.Outcome) {
	// The account and the key are the caller's: anything secret-shaped is
	// redacted as in the decision log.
	attrs := append(requestAttrs(r),
		"account", decisionlog.Redact(callerFrom(r.Context()).Account),
		"status", o.HTTPStatus(),
	)
	if o.Data != nil {
		attrs = append(attrs, "decision", o.Data.Decision, "decision_id", o.Data.DecisionID,
			"idempotency_key", decisionlog.RedactKey(o.Data.IdempotencyKey), "manifest_digest", o.Data.ManifestDigest,
			"bundle_revision", o.Data.BundleRevision, "run_id", o.Data.RunID)
	}
	if o.Code != "" {
		codes := make([]string, 0, len(o.Violations)+1)
		for _, v := range o.Violations {
			codes = append(codes, string(v.Code))
		}
		if len(codes) == 0 {
			codes = append(codes, string(o.Code))
		}
		attrs = append(attrs, "codes", codes)
	}
	s.opts.Logger.Info("admission", attrs...)
}
