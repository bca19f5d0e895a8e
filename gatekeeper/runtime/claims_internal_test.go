package runtime

import (
	"testing"
	"time"
)

// TestSecurityClaim_DecisionLogStallIs10s: docs/security.md G6 "a write
// hung for 10 s" turns every allow into DECISION_LOG_UNAVAILABLE: the
// stall bound the runtime gives the decision log (decisionlog.Options.Stall,
// whose behaviour TestStalledWriteFailsFastAndRecovers checks) is 10 s.
func TestSecurityClaim_DecisionLogStallIs10s(t *testing.T) {
	if decisionLogStall != 10*time.Second {
		t.Fatalf("decisionLogStall %v, documented 10 s", decisionLogStall)
	}
}
