package admission

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// manyRuns returns n live runs of acct_42 (i GPUs for run i, oldest first)
// interleaved with n of acct_43.
func manyRuns(n int) ledger.BookingUsage {
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	u := ledger.BookingUsage{BookingID: "bk_01"}
	for i := 1; i <= n; i++ {
		for _, acct := range []string{"acct_42", "acct_43"} {
			r := ledger.RunRecord{RunID: fmt.Sprintf("run_%s_%03d", acct[5:], i), Account: acct, BookingID: "bk_01",
				GPUs: 1 + i%20, AdmittedAt: at.Add(time.Duration(i) * time.Second), LiveUntil: at.Add(time.Hour)}
			u.Runs = append(u.Runs, r)
			u.HeldGPUs += r.GPUs
		}
	}
	return u
}

// TestBookingFactsBounded: input.ledger.booking lists at most 16 of the
// account's live runs — the largest (ties: soonest to end, then run id),
// oldest first — and counts them all; with 16 or fewer it lists all, as
// before.
func TestBookingFactsBounded(t *testing.T) {
	u := manyRuns(40)
	f := BookingFactsOf("acct_42", u)
	if f.LiveRunCount != 40 || f.HeldGPUs != u.HeldGPUs || f.Released {
		t.Fatalf("BookingFactsOf = %+v", f)
	}
	var ids []string
	for _, r := range f.LiveRuns {
		ids = append(ids, r.RunID)
	}
	// GPUs 1+i%20: 20 GPUs for i = 19, 39; 19 for 18, 38; … 13 for 12, 32.
	want := "run_42_012 run_42_013 run_42_014 run_42_015 run_42_016 run_42_017 run_42_018 run_42_019 " +
		"run_42_032 run_42_033 run_42_034 run_42_035 run_42_036 run_42_037 run_42_038 run_42_039"
	if got := strings.Join(ids, " "); got != want {
		t.Fatalf("live_runs = %s\nwant       %s", got, want)
	}

	small := BookingFactsOf("acct_42", manyRuns(3))
	if small.LiveRunCount != 3 || len(small.LiveRuns) != 3 || small.LiveRuns[0].RunID != "run_42_001" {
		t.Fatalf("BookingFactsOf(3 runs) = %+v", small)
	}
}

// TestCapacityMessageBounded: the refusal at commit names at most 16 of the
// account's runs and counts the rest; with 16 or fewer it is unchanged.
func TestCapacityMessageBounded(t *testing.T) {
	var own []ledger.RunRecord
	for _, r := range manyRuns(17).Runs {
		if r.Account == "acct_42" {
			own = append(own, r)
		}
	}
	for i := range own {
		own[i].GPUs = 4
	}
	ce := &ledger.CapacityError{BookingID: "bk_01", BookedGPUs: 64, HeldGPUs: 64, WantGPUs: 8, Runs: own}
	got := capacityMessage(ce)
	var parts []string
	for i := 1; i <= 16; i++ {
		parts = append(parts, fmt.Sprintf("run_42_%03d (4 GPUs, live until 2026-11-30T09:00:00Z)", i))
	}
	want := "the booking's 64 GPUs cannot hold 8 more: 64 are held by live runs: " + strings.Join(parts, ", ") +
		" and 1 more of this account's"
	if got != want {
		t.Fatalf("capacityMessage =\n%s\nwant\n%s", got, want)
	}
	ce.Runs = own[:2]
	want = "the booking's 64 GPUs cannot hold 8 more: 64 are held by live runs: " + strings.Join(parts[:2], ", ")
	if got := capacityMessage(ce); got != want {
		t.Fatalf("capacityMessage(2 runs) =\n%s\nwant\n%s", got, want)
	}
}
