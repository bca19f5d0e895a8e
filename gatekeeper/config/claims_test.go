package config

import (
	"strings"
	"testing"
	"time"
)

// TestTicketClaim_LifetimeBounds: docs/tickets.md "lifetime: 5m # exp − iat
// at most; 1m to 1h; default 5m (300 s)": the configuration accepts 0 (the
// default), 1m and 1h and refuses anything outside [1m, 1h].
func TestTicketClaim_LifetimeBounds(t *testing.T) {
	t.Parallel()
	base := Tickets{Issuer: "https://itogate.example",
		SigningKey: TicketKey{PEMFile: "ticket.key.pem", KeyID: "t1", Algorithm: "EdDSA"}}
	for _, tc := range []struct {
		lifetime time.Duration
		ok       bool
	}{
		{0, true}, {time.Minute, true}, {5 * time.Minute, true}, {time.Hour, true},
		{time.Minute - time.Second, false}, {time.Hour + time.Second, false}, {-time.Minute, false},
	} {
		tk := base
		tk.Lifetime = Duration(tc.lifetime)
		err := tk.validate(Trust{})
		switch {
		case tc.ok && err != nil:
			t.Errorf("lifetime %v refused: %v", tc.lifetime, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "lifetime must be in [1m0s, 1h0m0s]")):
			t.Errorf("lifetime %v: %v, want refused", tc.lifetime, err)
		}
	}
}
