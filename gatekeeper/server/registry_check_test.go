package server_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// registryChecked wraps the router of a test server so that every response
// any test provokes is checked against the code registry: an envelope with
// error.code answers exactly api.StatusOf(code), the one status of its code.
func registryChecked(t testing.TB, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recordingWriter{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		var env api.Envelope[json.RawMessage]
		if rec.status == 0 || json.Unmarshal(rec.body.Bytes(), &env) != nil || env.Error == nil {
			return
		}
		if want := api.StatusOf(env.Error.Code); rec.status != want {
			t.Errorf("%s %s answered %d %s; the registry's status for %s is %d",
				r.Method, r.URL.Path, rec.status, env.Error.Code, env.Error.Code, want)
		}
	})
}

type recordingWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *recordingWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (the body's
// read deadline).
func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
