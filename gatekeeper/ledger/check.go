package ledger

import (
	"context"
	"errors"
	"fmt"
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

// CheckCharges reports what breaks the charges of binding w, whose run
// holds runGPUs: each charge's owner and uid are uids of the binding, and
// the charges of one owner sum to at most runGPUs (Step accepts no charge
// beyond the run's GPUs, and a run never shrinks). Both stores' Check ask
// it of every binding; nil when sound.
func CheckCharges(w WorkloadBinding, runGPUs int) []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range w.Charges {
		if !w.HasUID(c.OwnerUID) || !w.HasUID(c.UID) {
			out = append(out, "run "+w.RunID+": charge "+c.Name+" of uid "+c.UID+" under "+c.OwnerUID+
				" is not of the binding's uids")
		}
		if seen[c.OwnerUID] {
			continue
		}
		seen[c.OwnerUID] = true
		if n := w.ChargedGPUs(c.OwnerUID); n > runGPUs {
			out = append(out, fmt.Sprintf("run %s: the children of %s are charged %d GPUs, the run holds %d",
				w.RunID, c.OwnerUID, n, runGPUs))
		}
	}
	return out
}
