package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors of the Workloads methods.
var (
	// ErrWorkloadBound: the run's ticket already created another workload
	// (another identity). Nothing was written.
	ErrWorkloadBound = errors.New("the run is bound to another workload")
	// ErrWorkloadOwnerUnbound: a child's owner uid is not one of the bound
	// workload's uids (or the run is bound to nothing). Nothing was written.
	ErrWorkloadOwnerUnbound = errors.New("the owner is not part of the run's bound workload")
)

// Workloads binds a run's admission ticket to the one workload it created
// (the Kubernetes admission webhook). Both stores implement it; ledgertest
// runs one conformance suite against each.
type Workloads interface {
	// BindWorkload records that b's object was admitted for b.RunID, in one
	// transaction:
	//
	//   - a root (b.OwnerUID empty): with no binding yet, b.Identity becomes
	//     the run's workload; with the same identity bound (a retried
	//     create), b.UID is added; with another identity bound,
	//     ErrWorkloadBound and nothing is written;
	//   - a child workload (b.OwnerUID set, e.g. a JobSet's Job): b.OwnerUID
	//     must already be a uid of the binding, else ErrWorkloadOwnerUnbound;
	//     b.UID is added.
	//
	// It returns the binding as stored afterwards. b must pass
	// WorkloadBind.Validate, else ErrInvalid.
	BindWorkload(ctx context.Context, b WorkloadBind) (WorkloadBinding, error)

	// WorkloadBinding returns the run's binding, or ErrNotFound when its
	// ticket created nothing yet.
	WorkloadBinding(ctx context.Context, runID string) (WorkloadBinding, error)
}

// WorkloadBind is one admitted object of a run's workload.
type WorkloadBind struct {
	RunID string
	// Identity names the root object: "<group>/<kind>/<namespace>/<name>"
	// (group empty for the core API). For a child, the root's identity is
	// not known to the child and Identity is ignored.
	Identity string
	// UID is the object's metadata.uid.
	UID string
	// OwnerUID is, for a child, its controller's uid; empty for a root.
	OwnerUID string
	At       time.Time
}

// WorkloadBinding is the workload a run's ticket created.
type WorkloadBinding struct {
	RunID    string
	Identity string
	// UIDs are the uids of the root object (one per create of the same
	// identity) and of child workloads, in the order they were added.
	UIDs    []string
	BoundAt time.Time
}

// HasUID reports whether uid belongs to the binding.
func (w WorkloadBinding) HasUID(uid string) bool {
	for _, u := range w.UIDs {
		if u == uid {
			return true
		}
	}
	return false
}

// maxWorkloadUIDs bounds the uids of one binding: every retried create and
// every child workload adds one, and a run never needs thousands.
const maxWorkloadUIDs = 4096

// MaxWorkloadUIDs is the bound on WorkloadBinding.UIDs; a bind beyond it
// fails with ErrInvalid.
const MaxWorkloadUIDs = maxWorkloadUIDs

// Validate checks b's fields: a run id, an identity for a root, uids of at
// most 128 printable characters. The error wraps ErrInvalid.
func (b WorkloadBind) Validate() error {
	bad := func(field, problem string) error {
		return fmt.Errorf("ledger: workload %s %s: %w", field, problem, ErrInvalid)
	}
	if !IsRunID(b.RunID) {
		return bad("RunID", "is not a run id from NewRunID")
	}
	if p := idProblem(b.UID); p != "" {
		return bad("UID", p)
	}
	if b.OwnerUID == "" {
		if b.Identity == "" {
			return bad("Identity", "is empty")
		}
		if p := textProblem(b.Identity); p != "" {
			return bad("Identity", p)
		}
	} else if p := idProblem(b.OwnerUID); p != "" {
		return bad("OwnerUID", p)
	}
	if b.At.IsZero() {
		return bad("At", "is zero")
	}
	return nil
}
