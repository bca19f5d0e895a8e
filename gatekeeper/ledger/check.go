package ledger

import (
	"context"
	"errors"
)

// Checker is implemented by stores that can verify their own invariants
// across every record: an fsck for operators after a crash or a restore, and
// the oracle of the crash tests. It only reads.
type Checker interface {
	// Check walks the whole ledger. It returns the counts it saw and, if
	// any invariant is broken, an error wrapping ErrInconsistent that lists
	// the first problems found (references and keys only, never tokens).
	// A store fault wraps ErrUnavailable instead.
	Check(ctx context.Context) (CheckReport, error)
}

// ErrInconsistent: Check found records that break the ledger's invariants,
// e.g. a consumed confirmation without the admission that consumed it.
var ErrInconsistent = errors.New("ledger inconsistent")

// CheckReport counts what Check saw.
type CheckReport struct {
	Confirmations int // every deposited confirmation, tombstones included
	Available     int
	Consumed      int
	Expired       int
	Swept         int // confirmations whose token was dropped
	Admissions    int
	Runs          int // admissions that created a run (train.create)
}
