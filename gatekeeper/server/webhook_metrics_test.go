package server_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/server"
	"github.com/itocompute/itogate/gatekeeper/webhook"
)

// The server's metrics are the webhook's observer in `itogate serve`.
var _ webhook.Observer = (*server.Metrics)(nil)

// TestWebhookReviewMetrics: one count per review by result and leading
// code, a latency histogram by result; label values outside the closed
// sets (a result the webhook never reports, a code not in the stable
// shape, a code on an allow) become "other" or "".
func TestWebhookReviewMetrics(t *testing.T) {
	m := server.NewMetrics()
	m.WebhookReview(webhook.ResultAllowed, "", 300*time.Microsecond)
	m.WebhookReview(webhook.ResultAllowed, "SHOULD_NOT_LABEL", 2*time.Millisecond)
	m.WebhookReview(webhook.ResultDenied, "WORKLOAD_TICKET_MISSING", 700*time.Microsecond)
	m.WebhookReview(webhook.ResultDenied, "WORKLOAD_TICKET_MISSING", 40*time.Millisecond)
	m.WebhookReview(webhook.ResultDenied, "not a code {x}", time.Millisecond)
	m.WebhookReview(webhook.ResultInvalid, string(api.CodeReviewInvalid), 3*time.Second)
	m.WebhookReview("invented", "LEDGER_UNAVAILABLE", 6*time.Second)
	m.WebhookReview(webhook.ResultWarned, "WORKLOAD_TICKET_MISSING", time.Millisecond)
	m.WebhookReview(webhook.ResultDenied, string(api.CodeInternal), time.Millisecond)
	m.WebhookPanic()

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)

	if got, want := grepMetric(text, "itogate_webhook_reviews_total{"), strings.Join([]string{
		`itogate_webhook_reviews_total{code="",result="allowed"} 2`,
		`itogate_webhook_reviews_total{code="INTERNAL_ERROR",result="denied"} 1`,
		`itogate_webhook_reviews_total{code="LEDGER_UNAVAILABLE",result="other"} 1`,
		`itogate_webhook_reviews_total{code="WORKLOAD_REVIEW_INVALID",result="invalid"} 1`,
		`itogate_webhook_reviews_total{code="WORKLOAD_TICKET_MISSING",result="denied"} 2`,
		`itogate_webhook_reviews_total{code="WORKLOAD_TICKET_MISSING",result="warned"} 1`,
		`itogate_webhook_reviews_total{code="other",result="denied"} 1`,
	}, "\n"); got != want {
		t.Errorf("reviews:\n%s\nwant:\n%s", got, want)
	}
	if got, want := grepMetric(text, `itogate_webhook_review_duration_seconds_bucket{result="denied"`), strings.Join([]string{
		`itogate_webhook_review_duration_seconds_bucket{result="denied",le="+Inf"} 4`,
		`itogate_webhook_review_duration_seconds_bucket{result="denied",le="0.0005"} 0`,
		`itogate_webhook_review_duration_seconds_bucket{result="denied",le="0.001"} 3`,
		`itogate_webhook_review_duration_seconds_bucket{result="denied",le="0.0025"} 3`,
		`itogate_webhook_review_duration_seconds_bucket{result="denied",le="0.005"} 3`,
		`itogate_webhook_review_duration_seconds_bucket{result="denied",le="0.01"} 3`,
		`itogate_webhook_review_duration_seconds_bucket{result="denied",le="0.025"} 3`,
		`itogate_webhook_review_duration_seconds_bucket{result="denied",le="0.05"} 4`,
		`itogate_webhook_review_duration_seconds_bucket{result="denied",le="0.1"} 4`,
		`itogate_webhook_review_duration_seconds_bucket{result="denied",le="0.25"} 4`,
		`itogate_webhook_review_duration_seconds_bucket{result="denied",le="0.5"} 4`,
		`itogate_webhook_review_duration_seconds_bucket{result="denied",le="1"} 4`,
		`itogate_webhook_review_duration_seconds_bucket{result="denied",le="2.5"} 4`,
		`itogate_webhook_review_duration_seconds_bucket{result="denied",le="5"} 4`,
	}, "\n"); got != want {
		t.Errorf("denied latency buckets:\n%s\nwant:\n%s", got, want)
	}
	for _, want := range []string{
		`itogate_webhook_review_duration_seconds_count{result="allowed"} 2`,
		`itogate_webhook_review_duration_seconds_count{result="warned"} 1`,
		`itogate_webhook_panics_total 1`,
		`itogate_webhook_review_duration_seconds_count{result="invalid"} 1`,
		`itogate_webhook_review_duration_seconds_count{result="other"} 1`,
		`itogate_webhook_review_duration_seconds_bucket{result="invalid",le="2.5"} 0`,
		`itogate_webhook_review_duration_seconds_bucket{result="invalid",le="5"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
}
