package ledger

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestCapacityErrorNamesAtMost16: the error string names MaxNamedRuns runs
// and counts the rest.
func TestCapacityErrorNamesAtMost16(t *testing.T) {
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	e := &CapacityError{BookingID: "bk", BookedGPUs: 20, HeldGPUs: 20, WantGPUs: 1}
	var ids []string
	for i := range 20 {
		r := RunRecord{RunID: fmt.Sprintf("run_%02d", i), GPUs: 1, LiveUntil: at.Add(time.Duration(20-i) * time.Minute)}
		e.Runs = append(e.Runs, r)
		if i >= 4 { // same GPUs: the soonest to end are named
			ids = append(ids, r.RunID+" (1 GPUs)")
		}
	}
	want := "ledger: booking capacity: 20 GPUs held + 1 wanted > 20 booked; live runs: " + strings.Join(ids, ", ") + " and 4 more"
	if got := e.Error(); got != want {
		t.Fatalf("Error() =\n%s\nwant\n%s", got, want)
	}
}
