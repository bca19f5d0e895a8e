package verify

import (
	"testing"
	"time"
)

// BenchmarkClaimsClone is the deep copy every cache hit (and miss) makes of
// the claims of a development entitlement token.
func BenchmarkClaimsClone(b *testing.B) {
	payload := []byte(`{"iss":"https://backend.dev.itogate.invalid","aud":"itogate","sub":"acct_demo","iat":1800000000,` +
		`"exp":1800000300,"jti":"jti_0123456789abcdef","booking_id":"bk_demo","booking_state":"completed",` +
		`"training_eligible":true,"gpu":{"type":"h100-sxm","nodes":2,"gpus_per_node":8},"region":"us-east",` +
		`"fabric":{"type":"infiniband","gbps_per_gpu":200},"term":{"start":1799996400,"end":1802592000},` +
		`"price_per_gpu_hour_usd":"2.49"}`)
	v := &TokenVerifier{purpose: PurposeEntitlement, issuer: "https://backend.dev.itogate.invalid", audience: "itogate", leeway: DefaultLeeway}
	c, err := v.checkClaims("k", payload, time.Unix(1_800_000_010, 0))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = c.clone()
	}
}
