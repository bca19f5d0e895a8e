// Package server is itogate's HTTP edge: routing, limits, caller
// authentication, strict request decoding, envelopes and metrics. Decisions
// are made by the admission package; this package only translates.
package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/itocompute/itogate/gatekeeper/admission"
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
	// Ready reports whether a verified bundle is active and the ledger answers.
	Ready func(ctx context.Context) error
	// MaxBodyBytes bounds request bodies; RequestTimeout bounds a request.
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
		callers := s.authenticate("caller", opts.Callers, admission.CodeCallerUnauthenticated, true)
		depositors := s.authenticate("depositor", opts.Depositors, admission.CodeDepositorUnauthorized, false)
		r.With(s.limitBody, s.requireJSON, callers).Post("/admissions", s.postAdmission)
		r.With(callers).Get("/admissions/{idempotency_key}", s.getAdmission)
		r.With(s.limitBody, s.requireJSON, depositors).Post("/confirmations", s.postConfirmation)
		r.With(s.limitBody, s.requireJSON, depositors).Post("/confirmations/revocations", s.postConfirmationRevocation)
		revokers := s.refuse(admission.CodeRevokerUnauthenticated, "no revoker identity is configured (trust.revokers)")
		if opts.Revokers != nil {
			revokers = s.authenticate("revoker", opts.Revokers, admission.CodeRevokerUnauthenticated, false)
		}
		r.With(s.limitBody, s.requireJSON, revokers).Post("/revocations", s.postRevocation)
		r.Get("/tickets/jwks", s.ticketJWKS)
	})
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "ROUTE_NOT_FOUND", "no such route")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "method not allowed on this route")
	})
	return r, nil
}

type srv struct{ opts Options }

// CodeTicketsDisabled answers GET /v1/tickets/jwks when no tickets section
// is configured.
const CodeTicketsDisabled = "TICKETS_DISABLED"

// ticketJWKS serves the ticket public keys as a bare JWKS (RFC 7517 §5),
// not an envelope: JWKS consumers (`itogate ticket verify --jwks`, OPA's
// io.jwt.decode_verify, any JOSE library) read it as is. Public keys only,
// no authentication; cacheable for five minutes, shorter than any rotation
// overlap (tickets.previous_jwks_file).
func (s *srv) ticketJWKS(w http.ResponseWriter, _ *http.Request) {
	if s.opts.TicketJWKS == nil {
		writeError(w, http.StatusNotFound, CodeTicketsDisabled, "tickets are not configured on this itogate")
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
func (s *srv) authenticate(purpose string, v admission.TokenVerifier, code string, needAccount bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := r.Header.Get("Authorization")
			const prefix = "bearer "
			if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="itogate"`)
				writeError(w, http.StatusUnauthorized, code, "a bearer token is required")
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
				writeError(w, http.StatusUnauthorized, code, "the bearer token was rejected")
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
				writeError(w, http.StatusUnauthorized, code, "the bearer token carries no account claim")
				return
			}
			// The account keys the caller's admissions in the ledger: one the
			// ledger cannot hold (over-long, NUL) is refused here, alike on
			// every backend, instead of surfacing as a ledger fault.
			if p := ledger.IDProblem(account); needAccount && p != "" {
				s.opts.Logger.Warn("bearer token rejected", append([]any{"purpose", purpose, "reason", "account claim " + p,
					"key_id", claims.KeyID}, requestAttrs(r)...)...)
				w.Header().Set("WWW-Authenticate", `Bearer realm="itogate", error="invalid_token"`)
				writeError(w, http.StatusUnauthorized, code, "the bearer token's account claim "+p)
				return
			}
			if purpose == "caller" {
				// A key withdrawn from trust by a revocation answers like
				// an unknown key, with its own code: the client stops.
				if out, revoked := s.opts.Admission.CallerRevoked(r.Context(), claims.KeyID); revoked {
					s.opts.Logger.Warn("bearer token rejected", append([]any{"purpose", purpose, "reason", out.Code,
						"key_id", claims.KeyID}, requestAttrs(r)...)...)
					if out.Status == http.StatusUnauthorized {
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
			writeError(w, http.StatusRequestEntityTooLarge, admission.CodeRequestTooLarge,
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
			writeError(w, http.StatusUnsupportedMediaType, admission.CodeContentType, "Content-Type must be application/json")
			return
		}
		// Bodies are read as sent: a compressed one is an unsupported media
		// type, not malformed JSON (the header's value is not echoed).
		if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
			writeError(w, http.StatusUnsupportedMediaType, admission.CodeContentType,
				"Content-Encoding is not supported: send the application/json body uncompressed")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// admissionBody is the POST /v1/admissions request.
type admissionBody struct {
	Action            string `json:"action"`
	BookingID         string `json:"booking_id"`
	IdempotencyKey    string `json:"idempotency_key"`
	Manifest          string `json:"manifest"` // standard base64 of the exact manifest bytes
	ManifestSignature string `json:"manifest_signature"`
	EntitlementToken  string `json:"entitlement_token"`
	ConfirmationRef   string `json:"confirmation_ref"`
	RunID             string `json:"run_id"`
	ReleasesBooking   bool   `json:"releases_booking"`
	// Stage is the stage a train.stage.advance moves the run to.
	Stage string `json:"stage"`
	// CheckpointStep is the step a train.restart restarts from.
	CheckpointStep int64 `json:"checkpoint_step"`
	// EvalReports are eval-authority tokens (compact JWS): the eval report
	// of a stage advance, ladder decisions for custom data on a create.
	EvalReports []string `json:"eval_reports"`
}

func (s *srv) postAdmission(w http.ResponseWriter, r *http.Request) {
	obj, status, code, msg := readObject(r)
	if code != "" {
		writeError(w, status, code, msg)
		return
	}
	var b admissionBody
	if err := fields(obj, map[string]any{
		"action": &b.Action, "booking_id": &b.BookingID, "idempotency_key": &b.IdempotencyKey,
		"manifest": &b.Manifest, "manifest_signature": &b.ManifestSignature,
		"entitlement_token": &b.EntitlementToken, "confirmation_ref": &b.ConfirmationRef,
		"run_id": &b.RunID, "releases_booking": &b.ReleasesBooking,
		"stage": &b.Stage, "checkpoint_step": &b.CheckpointStep, "eval_reports": &b.EvalReports,
	}); err != nil {
		writeError(w, http.StatusBadRequest, admission.CodeRequestInvalid, err.Error())
		return
	}
	var raw []byte
	if b.Manifest != "" {
		var err error
		raw, err = base64.StdEncoding.Strict().DecodeString(b.Manifest)
		// Go's decoder skips \r and \n even in strict mode; RFC 4648 §4
		// text has none, so one manifest has exactly one encoding.
		if err != nil || strings.ContainsAny(b.Manifest, "\r\n") {
			writeError(w, http.StatusBadRequest, admission.CodeManifestEncoding, "manifest must be standard base64 (RFC 4648 §4)")
			return
		}
	}
	out := s.opts.Admission.Admit(r.Context(), callerFrom(r.Context()), admission.Request{
		Action: b.Action, BookingID: b.BookingID, IdempotencyKey: b.IdempotencyKey, Manifest: raw,
		ManifestSignature: b.ManifestSignature, EntitlementToken: b.EntitlementToken,
		ConfirmationRef: b.ConfirmationRef, RunID: b.RunID, ReleasesBooking: b.ReleasesBooking,
		Stage: b.Stage, CheckpointStep: b.CheckpointStep, EvalReports: b.EvalReports,
	})
	s.opts.Metrics.decision(out)
	if out.Cause != nil {
		s.opts.Metrics.verifyFailure("", out.Cause)
	}
	s.logDecision(r, out)
	writeOutcome(w, out)
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
		writeError(w, http.StatusBadRequest, admission.CodeRequestInvalid, "idempotency_key: not a valid percent-encoded path segment")
		return
	}
	writeOutcome(w, s.opts.Admission.Status(r.Context(), callerFrom(r.Context()), key))
}

func (s *srv) postConfirmation(w http.ResponseWriter, r *http.Request) {
	obj, status, code, msg := readObject(r)
	if code != "" {
		writeError(w, status, code, msg)
		return
	}
	var token string
	if err := fields(obj, map[string]any{"confirmation_token": &token}); err != nil {
		writeError(w, http.StatusBadRequest, admission.CodeRequestInvalid, err.Error())
		return
	}
	writeOutcome(w, s.opts.Admission.Deposit(r.Context(), token))
}

// refuse answers every request with a 401 code (a route whose identity is
// not configured).
func (s *srv) refuse(code, msg string) func(http.Handler) http.Handler {
	return func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="itogate"`)
			writeError(w, http.StatusUnauthorized, code, msg)
		})
	}
}

// postConfirmationRevocation: the confirmation authority revokes a
// confirmation by ref (deposited) or by jti (deposited or not yet).
func (s *srv) postConfirmationRevocation(w http.ResponseWriter, r *http.Request) {
	obj, status, code, msg := readObject(r)
	if code != "" {
		writeError(w, status, code, msg)
		return
	}
	var rv admission.Revocation
	if err := fields(obj, map[string]any{"ref": &rv.Ref, "jti": &rv.Subject, "expires_at": &rv.ExpiresAt,
		"reason": &rv.Reason}); err != nil {
		writeError(w, http.StatusBadRequest, admission.CodeRequestInvalid, err.Error())
		return
	}
	who := callerFrom(r.Context())
	rv.Kind, rv.By, rv.KeyID, rv.Identity = ledger.RevokeConfirmation, who.Subject, who.KeyID, "depositor"
	writeOutcome(w, s.opts.Admission.Revoke(r.Context(), rv))
}

// postRevocation: the entitlement issuer's revoker revokes an entitlement
// (by jti), a booking or a caller key.
func (s *srv) postRevocation(w http.ResponseWriter, r *http.Request) {
	obj, status, code, msg := readObject(r)
	if code != "" {
		writeError(w, status, code, msg)
		return
	}
	var rv admission.Revocation
	var kind string
	if err := fields(obj, map[string]any{"kind": &kind, "subject": &rv.Subject, "expires_at": &rv.ExpiresAt,
		"reason": &rv.Reason}); err != nil {
		writeError(w, http.StatusBadRequest, admission.CodeRequestInvalid, err.Error())
		return
	}
	who := callerFrom(r.Context())
	rv.Kind, rv.By, rv.KeyID, rv.Identity = ledger.RevocationKind(kind), who.Subject, who.KeyID, "revoker"
	writeOutcome(w, s.opts.Admission.Revoke(r.Context(), rv))
}

func (s *srv) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.opts.Ready(ctx); err != nil {
		writeError(w, http.StatusServiceUnavailable, "NOT_READY", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, Envelope{OK: true, Data: map[string]any{"status": "ready"}})
}

// readObject reads the whole (size-limited) body as one strict JSON object.
func readObject(r *http.Request) (map[string]any, int, string, string) {
	buf, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, http.StatusRequestEntityTooLarge, admission.CodeRequestTooLarge,
				"request body larger than " + strconv.FormatInt(mbe.Limit, 10) + " bytes"
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, http.StatusRequestTimeout, admission.CodeRequestTimeout,
				"the request body did not arrive before the request deadline"
		}
		return nil, http.StatusBadRequest, admission.CodeRequestInvalid, "could not read the request body"
	}
	if bytes.HasPrefix(buf, []byte{0x1f, 0x8b}) { // gzip's magic number, sent without Content-Encoding
		return nil, http.StatusUnsupportedMediaType, admission.CodeContentType,
			"the body is gzip-compressed: send the application/json body uncompressed"
	}
	obj, err := strictjson.DecodeObject(buf, 8)
	if err != nil {
		return nil, http.StatusBadRequest, admission.CodeRequestInvalid, err.Error()
	}
	return obj, 0, "", ""
}

// fields copies known members of obj into typed destinations (*string or
// *bool) and refuses unknown members and wrong types. Names match exactly:
// unlike encoding/json, "Action" is not "action".
func fields(obj map[string]any, dst map[string]any) error {
	for k, v := range obj {
		d, ok := dst[k]
		if !ok {
			return fmt.Errorf("unknown field %s", fieldLabel(k))
		}
		switch p := d.(type) {
		case *string:
			s, ok := v.(string)
			if !ok {
				return fmt.Errorf("field %q must be a string", k)
			}
			*p = s
		case *bool:
			b, ok := v.(bool)
			if !ok {
				return fmt.Errorf("field %q must be a boolean", k)
			}
			*p = b
		case *int64:
			n, ok := v.(json.Number)
			i, err := n.Int64()
			if !ok || err != nil {
				return fmt.Errorf("field %q must be an integer", k)
			}
			*p = i
		case *[]string:
			arr, ok := v.([]any)
			if !ok || len(arr) > admission.MaxEvalReports {
				return fmt.Errorf("field %q must be an array of at most %d strings", k, admission.MaxEvalReports)
			}
			out := make([]string, 0, len(arr))
			for _, e := range arr {
				s, ok := e.(string)
				if !ok {
					return fmt.Errorf("field %q must be an array of strings", k)
				}
				out = append(out, s)
			}
			*p = out
		}
	}
	return nil
}

// fieldName is what a member name looks like. An unknown key is echoed
// only when it matches: a key is the caller's to choose and may be a token
// or a credential (a misplaced {"eyJ…": 1}), and an error message is never
// allowed to carry one (the manifest and strictjson packages withhold the
// same names).
var fieldName = regexp.MustCompile(`^[a-z][a-z_]{0,39}$`)

func fieldLabel(k string) string {
	if !fieldName.MatchString(k) {
		return "(a name not shown)"
	}
	return strconv.Quote(k)
}

func (s *srv) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if rec := recover(); rec != nil {
				if rec == http.ErrAbortHandler {
					panic(rec)
				}
				s.opts.Logger.Error("panic in handler", append(requestAttrs(r), "panic", decisionlog.Redact(fmt.Sprint(rec)))...)
				writeError(w, http.StatusInternalServerError, admission.CodeInternal, "internal error; denied")
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
		"status", o.Status,
	)
	if o.Data != nil {
		attrs = append(attrs, "decision", o.Data.Decision, "decision_id", o.Data.DecisionID,
			"idempotency_key", decisionlog.RedactKey(o.Data.IdempotencyKey), "manifest_digest", o.Data.ManifestDigest,
			"bundle_revision", o.Data.BundleRevision, "run_id", o.Data.RunID)
	}
	if o.Code != "" {
		codes := make([]string, 0, len(o.Violations)+1)
		for _, v := range o.Violations {
			codes = append(codes, v.Code)
		}
		if len(codes) == 0 {
			codes = append(codes, o.Code)
		}
		attrs = append(attrs, "codes", codes)
	}
	s.opts.Logger.Info("admission", attrs...)
}
