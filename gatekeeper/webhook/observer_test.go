package webhook_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/webhook"
)

type observed struct{ result, code string }

type recorder struct {
	mu     sync.Mutex
	got    []observed
	panics int
}

func (r *recorder) WebhookPanic() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.panics++
}

func (r *recorder) WebhookReview(result, code string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d < 0 {
		result = "negative duration"
	}
	r.got = append(r.got, observed{result, code})
}

// TestObserver: every answered request is reported once, with its result
// and the code that leads its denial.
func TestObserver(t *testing.T) {
	f := newFixture(t)
	rec := &recorder{}
	opts := f.opts
	opts.Observer = rec
	h, err := webhook.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	wantAllowed(t, post(t, h, "batch", "v1", "Job", job("team-a", "train", "uid-job", f.ticket, 2, 8), true))
	wantDenied(t, post(t, h, "", "v1", "Pod", pod("team-a", "p", "uid-p", "", "", 8), false), "WORKLOAD_TICKET_MISSING")
	for _, c := range []struct {
		method, contentType, body string
		status                    int
	}{
		{http.MethodGet, "application/json", "", http.StatusMethodNotAllowed},
		{http.MethodPost, "text/plain", "{}", http.StatusUnsupportedMediaType},
		{http.MethodPost, "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest},
	} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(c.method, "/validate", bytes.NewReader([]byte(c.body)))
		req.Header.Set("Content-Type", c.contentType)
		h.ServeHTTP(w, req)
		if w.Code != c.status {
			t.Fatalf("%s %s %q: HTTP %d, want %d", c.method, c.contentType, c.body, w.Code, c.status)
		}
	}
	want := []observed{
		{webhook.ResultAllowed, ""},
		{webhook.ResultDenied, "WORKLOAD_TICKET_MISSING"},
		{webhook.ResultInvalid, string(api.CodeMethodNotAllowed)},
		{webhook.ResultInvalid, string(api.CodeContentType)},
		{webhook.ResultInvalid, string(api.CodeReviewInvalid)},
	}
	if !slices.Equal(rec.got, want) {
		t.Fatalf("observed %v, want %v", rec.got, want)
	}
}
