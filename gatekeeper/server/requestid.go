package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"regexp"
)

// RequestIDHeader carries the request id: the server's in every response,
// and optionally the caller's own in a request.
const RequestIDHeader = "X-Request-Id"

// clientRequestID is the only shape of a caller's X-Request-Id that is
// logged: a UUID (RFC 9562 text form). Anything else — a token pasted into
// the header, 40 KiB of filler, a log-forging line break — is ignored.
var clientRequestID = regexp.MustCompile(`^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$`)

type requestIDKey struct{}

type requestIDs struct{ server, client string }

// requestID gives every request an id generated here ("req_" and 16 random
// bytes in hex), returned in the X-Request-Id response header and logged as
// request_id. The server's id is never the caller's choice, so no caller can
// make its request share another's id. A caller's own X-Request-Id is kept,
// as client_request_id, only when it is a UUID.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ids := requestIDs{server: newRequestID()}
		if c := r.Header.Get(RequestIDHeader); clientRequestID.MatchString(c) {
			ids.client = c
		}
		w.Header().Set(RequestIDHeader, ids.server)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, ids)))
	})
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "req_" + hex.EncodeToString(b[:])
}

// requestAttrs are the log attributes naming r: request_id, and
// client_request_id when the caller sent a UUID.
func requestAttrs(r *http.Request) []any {
	ids, _ := r.Context().Value(requestIDKey{}).(requestIDs)
	if ids.client == "" {
		return []any{"request_id", ids.server}
	}
	return []any{"request_id", ids.server, "client_request_id", ids.client}
}
