package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// ErrWorkloadOwnerRetired: a child's owner descends from a root object
	// that a newer object of the same name replaced (it was deleted and
	// re-created): its uid admits no children. Nothing was written.
	ErrWorkloadOwnerRetired = errors.New("the owner was replaced by a re-created object of the same name")
	// ErrWorkloadGPUsExceed: a child workload's GPUs plus those its
	// owner's other recorded children hold exceed the run's GPUs
	// (*WorkloadGPUsError carries the figures). Nothing was written.
	ErrWorkloadGPUsExceed = errors.New("the owner's child workloads together exceed the run's GPUs")
)

// WorkloadGPUsError is the ErrWorkloadGPUsExceed of a child bind: the
// owner's other children hold Held GPUs, the child asks for GPUs, the run
// holds RunGPUs (RunRecord.GPUs, as grown by stage advances) and Held +
// GPUs > RunGPUs. It unwraps to ErrWorkloadGPUsExceed.
type WorkloadGPUsError struct {
	OwnerUID            string
	Held, GPUs, RunGPUs int
}

func (e *WorkloadGPUsError) Error() string {
	return fmt.Sprintf("ledger: bind workload: %d GPUs with the %d the owner's other children hold, the run holds %d: %v",
		e.GPUs, e.Held, e.RunGPUs, ErrWorkloadGPUsExceed)
}

// Unwrap returns ErrWorkloadGPUsExceed.
func (e *WorkloadGPUsError) Unwrap() error { return ErrWorkloadGPUsExceed }

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
	//     b.UID is added, and a child that is not Leaf is charged b.GPUs:
	//     with what the owner's other recorded children hold it must not
	//     exceed the run's GPUs (RunRecord.GPUs as the transaction reads
	//     them), else a *WorkloadGPUsError (ErrWorkloadGPUsExceed) and
	//     nothing is written (Step says how a retry, an UPDATE and a
	//     re-created child are charged).
	//
	// One root object at a time has children: the binding's Active root,
	// set by the first child bound under a root (Step says exactly how a
	// newer root of the same name takes over and when a child is refused
	// ErrWorkloadBound or ErrWorkloadOwnerRetired). A Leaf child (a Pod) is
	// checked and may set Active, but its uid is not recorded.
	//
	// In the same transaction the run must exist (else ErrNotFound) and,
	// when the step writes anything (BindStep.Writes), may take work at
	// b.At (RunRecord.MayWork, whose typed error is returned: a halt,
	// revocation or end committed between the webhook's read and its bind
	// refuses the bind) and must not have started a scheduler job (Jobs:
	// else a *SinkBoundError naming it, which unwraps to ErrWorkloadBound,
	// no binding returned). A bind that changes nothing — an UPDATE of a bound
	// object, a child of the active root already recorded — is not new
	// work and succeeds whatever the run's state (teardown of an ended run).
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
	// not known to the child: a child's Identity names the child itself
	// and keys its charge (GPUs); it may be empty.
	Identity string
	// UID is the object's metadata.uid.
	UID string
	// OwnerUID is, for a child, its controller's uid; empty for a root.
	OwnerUID string
	// Leaf marks a child that has no children of its own (a Pod): its uid
	// is not recorded, so a long run's Pods never fill the binding.
	Leaf bool
	// GPUs is, for a child that is not Leaf, the GPUs the policy counted
	// for the object (replicas × per Pod): what it is charged of the run's
	// GPUs together with its owner's other children (WorkloadCharge). Its
	// Identity then names the child itself, "<group>/<kind>/<namespace>/
	// <name>" with the name the apiserver assigned, and keys its charge
	// (empty: the charge is keyed by UID). Ignored for roots and Leaf
	// children, whose GPUs the policy checks alone.
	GPUs int
	At   time.Time
}

// WorkloadCharge is what one child workload that is not Leaf holds of its
// run's GPUs. The children of one owner run at once (a JobSet's Jobs, a
// RayService's RayClusters during an upgrade), so their charges together
// stay within the run's GPUs. The webhook never sees a delete: a charge
// stays until the run ends, unless a child of the same name replaces it.
type WorkloadCharge struct {
	// OwnerUID is the child's controller; children of one owner are
	// charged together.
	OwnerUID string
	// Name is the child's identity (WorkloadBind.Identity), or its uid
	// when the bind named none. One name is one object at a time, so a
	// child re-created under its name (a JobSet's Jobs after a restart)
	// takes over the charge of the one it replaces.
	Name string
	// UID is the object holding the charge now.
	UID string
	// GPUs is the most the object asked for (an UPDATE never lowers it).
	GPUs int
}

// WorkloadBinding is the workload a run's ticket created.
type WorkloadBinding struct {
	RunID    string
	Identity string
	// UIDs are the uids of the root object (one per create of the same
	// identity) and of child workloads, in the order they were added.
	UIDs []string
	// Roots maps each uid of UIDs to the root uid it descends from (a
	// root's is itself). A uid bound before roots were recorded maps to
	// the binding's first uid.
	Roots map[string]string
	// Active is the root uid whose descendants may have children; "" until
	// the first child is bound.
	Active string
	// Charges are the GPUs child workloads hold, one per owner and name,
	// in the order first charged.
	Charges []WorkloadCharge
	BoundAt time.Time
}

// ChargedGPUs is the sum of the GPUs the children of owner hold.
func (w WorkloadBinding) ChargedGPUs(owner string) int {
	n := 0
	for _, c := range w.Charges {
		if c.OwnerUID == owner {
			n += c.GPUs
		}
	}
	return n
}

// GeneratedIdentitySuffix ends the Identity of a root created with
// metadata.generateName: "<group>/<kind>/<namespace>/<generateName>*". A
// retried create (a new generated name) is then the same identity; since
// two objects may share it at once, the first root with a child is the
// one that runs (Step).
const GeneratedIdentitySuffix = "*"

// BindStep is what one BindWorkload changes: the binding afterwards, and
// the writes that take the stored binding there.
type BindStep struct {
	Binding WorkloadBinding
	// Create: there was no binding; it is created with Binding's
	// Identity and BoundAt.
	Create bool
	// AddUID is the uid to record under AddRoot; "" when none.
	AddUID, AddRoot string
	// Activate: Binding.Active changed.
	Activate bool
	// Charge is the child's charge to store (added, raised, or taken over
	// by a re-created child of its name); nil when unchanged.
	Charge *WorkloadCharge
}

// Writes reports whether the step changes the stored binding.
func (s BindStep) Writes() bool { return s.Create || s.AddUID != "" || s.Activate || s.Charge != nil }

// Step is the one definition of BindWorkload's rules, shared by both
// stores: cur is the stored binding (found false when the run has none),
// b a bind that passed Validate. On an error nothing is written; with
// ErrWorkloadBound for a root, the step's Binding is the stored one.
//
//   - A root (b.OwnerUID empty) binds its identity when none is bound and
//     adds b.UID as a root; another identity is ErrWorkloadBound.
//   - A child's owner must be a uid of the binding (else
//     ErrWorkloadOwnerUnbound); r is the root it descends from. With no
//     Active root, r becomes Active. With another Active root: when the
//     identity is a name (not generated) and r was bound after it, r
//     becomes Active — one name is one object at a time, so the older root
//     was deleted; when r is older, ErrWorkloadOwnerRetired; when the
//     identity is generated, two objects of one generateName exist and
//     ErrWorkloadBound. A child that is not Leaf adds b.UID under r.
//   - A child that is not Leaf is charged (WorkloadCharge) under its
//     owner and name: the same uid again (a retried create, an UPDATE)
//     changes nothing unless it asks for more GPUs than charged; a new
//     uid of a charged name (the object was re-created) takes the charge
//     over with its own GPUs; a new name with no GPUs is not charged.
//     A charge that changes is checked: with the owner's other charges it
//     must stay within runGPUs, else a *WorkloadGPUsError.
//   - More than MaxWorkloadUIDs uids is ErrInvalid.
func Step(cur WorkloadBinding, found bool, b WorkloadBind, runGPUs int) (BindStep, error) {
	out := BindStep{Binding: cur}
	w := &out.Binding
	w.UIDs = slices.Clone(cur.UIDs)
	w.Charges = slices.Clone(cur.Charges)
	w.Roots = make(map[string]string, len(cur.UIDs)+1)
	for _, u := range cur.UIDs {
		w.Roots[u] = cur.RootOf(u)
	}
	root := b.UID
	if b.OwnerUID == "" {
		switch {
		case !found:
			w.Identity, w.BoundAt = b.Identity, b.At.UTC().Truncate(time.Microsecond)
			out.Create = true
		case cur.Identity != b.Identity:
			return BindStep{Binding: cur}, fmt.Errorf("ledger: bind workload: %w", ErrWorkloadBound)
		}
	} else {
		if !found || !slices.Contains(cur.UIDs, b.OwnerUID) {
			return BindStep{}, fmt.Errorf("ledger: bind workload: %w", ErrWorkloadOwnerUnbound)
		}
		root = w.Roots[b.OwnerUID]
		switch active := cur.Active; {
		case active == "" || active == root:
		case strings.HasSuffix(cur.Identity, GeneratedIdentitySuffix):
			return BindStep{}, fmt.Errorf("ledger: bind workload: another object of generateName %s already runs: %w",
				cur.Identity, ErrWorkloadBound)
		case slices.Index(cur.UIDs, root) < slices.Index(cur.UIDs, active):
			return BindStep{}, fmt.Errorf("ledger: bind workload: %w", ErrWorkloadOwnerRetired)
		}
		if cur.Active != root {
			w.Active, out.Activate = root, true
		}
		if b.Leaf {
			return out, nil
		}
		if err := charge(&out, b, runGPUs); err != nil {
			return BindStep{}, err
		}
	}
	if !slices.Contains(w.UIDs, b.UID) {
		if len(w.UIDs) >= MaxWorkloadUIDs {
			return BindStep{}, fmt.Errorf("ledger: bind workload: more than %d uids: %w", MaxWorkloadUIDs, ErrInvalid)
		}
		w.UIDs = append(w.UIDs, b.UID)
		w.Roots[b.UID] = root
		out.AddUID, out.AddRoot = b.UID, root
	}
	return out, nil
}

// charge applies a child's charge to out (Step's rule).
func charge(out *BindStep, b WorkloadBind, runGPUs int) error {
	w := &out.Binding
	name := b.Identity
	if name == "" {
		name = b.UID
	}
	i := slices.IndexFunc(w.Charges, func(c WorkloadCharge) bool { return c.OwnerUID == b.OwnerUID && c.Name == name })
	c := WorkloadCharge{OwnerUID: b.OwnerUID, Name: name, UID: b.UID, GPUs: b.GPUs}
	switch {
	case i < 0 && b.GPUs == 0:
		return nil
	case i >= 0 && w.Charges[i].UID == b.UID:
		if b.GPUs <= w.Charges[i].GPUs {
			return nil
		}
	}
	held := w.ChargedGPUs(b.OwnerUID)
	if i >= 0 {
		held -= w.Charges[i].GPUs
	}
	if held+c.GPUs > runGPUs {
		return &WorkloadGPUsError{OwnerUID: b.OwnerUID, Held: held, GPUs: c.GPUs, RunGPUs: runGPUs}
	}
	if i >= 0 {
		w.Charges[i] = c
	} else {
		w.Charges = append(w.Charges, c)
	}
	out.Charge = &c
	return nil
}

// RootOf is the root uid uid descends from: Roots[uid], else (a uid bound
// before roots were recorded) the binding's first uid.
func (w WorkloadBinding) RootOf(uid string) string {
	if r, ok := w.Roots[uid]; ok && r != "" {
		return r
	}
	if len(w.UIDs) > 0 {
		return w.UIDs[0]
	}
	return ""
}

// Admits reports whether a Leaf child of owner is admitted by the binding
// as it stands, with nothing to write: owner is one of its uids and
// descends from the Active root. (The webhook's fast path: only the first
// child of a root, or a child of a newer root, goes to BindWorkload.)
func (w WorkloadBinding) Admits(owner string) bool {
	return w.Active != "" && w.HasUID(owner) && w.RootOf(owner) == w.Active
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
	} else if b.Identity != "" {
		if p := textProblem(b.Identity); p != "" {
			return bad("Identity", p)
		}
	}
	if b.GPUs < 0 {
		return bad("GPUs", "is negative")
	}
	if b.At.IsZero() {
		return bad("At", "is zero")
	}
	return nil
}
