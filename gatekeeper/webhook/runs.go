package webhook

import (
	"context"
	"time"

	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// LedgerRuns answers RunFacts from the ledger's run index (Store.Run: the
// train.create admission of the run).
//
// It reports every admitted run as live: the ledger does not yet keep the
// run's life (cancelled, cleaned up, booking released, past its declared
// end). When the run record lands, this is the one place that switches to
// its Live — the webhook has no notion of liveness of its own.
type LedgerRuns struct{ Store ledger.Store }

// RunFacts implements Runs.
func (l LedgerRuns) RunFacts(ctx context.Context, runID string, _ time.Time) (RunFacts, error) {
	a, err := l.Store.Run(ctx, runID)
	if err != nil {
		return RunFacts{}, err
	}
	return RunFacts{Account: a.Account, BookingID: a.BookingID, Live: true}, nil
}
