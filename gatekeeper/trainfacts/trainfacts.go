// Package trainfacts computes, once per decision, the training facts the
// admission policy judges a train.create by (and a train.stage.advance, by
// the effective manifest of the stage it enters: StageManifest): which of
// the fields the gates compute with are missing or ill-typed (of the
// manifest as written), the manifest's parallel layout
// and its figures (data-parallel degree, microbatches, tokens per GPU,
// model-state, activation and total memory per GPU, pipeline bubble,
// data-parallel communication against compute), the checkpoint model
// (size, write, resume, interval, work lost per failure, expected goodput;
// the failure rate and the tiers' write bandwidth from the entitlement's
// signed telemetry claim when it is well-formed, within the bundle's bounds
// and fresh, else from bundle data) and the money (compute with the
// GPU-hours expected lost to failures, storage, egress, total and
// incremental cost).
//
// The policy input carries them as input.facts (docs/policy-input.md); the
// gates read them and keep every rule, threshold, code, message and fix
// text. Every table and constant of the model is read from the bundle's
// data when the bundle is activated (New), never from Go constants, and
// the bundle keeps the formulas as the reference: data.ito.facts.reference
// evaluates them in Rego, and TestFactsMatchReference holds Go's facts
// byte-identical to it (OPA's number semantics, internal/regonum) on every
// fixture, the manifests at the schema's limits and thousands of seeded
// mutations. A bundle declares the facts-model version it was written for
// (data.ito.config.facts.model_version); New refuses any other.
package trainfacts

import (
	"errors"
	"fmt"
	"slices"

	"github.com/itocompute/itogate/internal/regonum"
)

// Version is the facts model this package computes: the shape and meaning
// of input.facts. A bundle whose data.ito.config.facts.model_version is
// another is refused (New), and a decision whose input carries facts of
// another version fails closed (policy.Engine.Decide).
const Version = 5

// ErrVersion: the bundle was written for another facts model.
var ErrVersion = errors.New("trainfacts: the bundle expects another facts model")

// Model is the facts model over one bundle's data. It is immutable and safe
// for concurrent use.
type Model struct {
	par     parallelismConfig
	gpus    map[string]gpuRow
	fabrics map[string]fabricRow
	ckpt    checkpointConfig
	storage map[string]storageRow
	tiers   []string // storage table names, sorted
	budget  budgetConfig
	creds   credentialConfig
	fields  []manifestField
	// stages: kind_values.stage, the stages whose stage_settings the field
	// check looks at, in order
	stages []any
	fixer  Fixer
}

// Fixer proposes the fix of a train.create whose layout the parallelism
// gate denies: the policy engine's layout search (gatekeeper/plan),
// confirmed by the bundle's own rules. Fix returns input.facts.parallelism.fix
// for the input document, or nil when the manifest's layout passes (no
// search runs on an allow) or cannot be judged.
type Fixer interface {
	Fix(doc map[string]any) map[string]any
}

// WithFixer is a copy of m whose Compute adds the fixer's fix to the
// parallelism facts. m itself is unchanged (and is what a Fixer computes
// its candidates' facts with).
func (m *Model) WithFixer(f Fixer) *Model {
	c := *m
	c.fixer = f
	return &c
}

// New reads the model's tables and constants from a bundle's data document
// (the root of data: {"ito": {...}}). It fails when the bundle declares no
// facts-model version or another one than Version (ErrVersion), and when a
// table or constant the model reads is there but of another type than the
// formulas take (a number written as a string): Rego would raise a type
// error where Go could only leave the figure out, so such a bundle is
// refused at activation. A missing table or constant is undefined in both.
func New(data map[string]any) (*Model, error) {
	r := reader{}
	ito := r.obj(data, "ito")
	cfg := r.obj(ito, "config")
	tables := r.obj(ito, "tables")
	facts := r.obj(cfg, "facts")
	if r.err != nil {
		return nil, r.err
	}
	v, ok := regonum.Of(facts["model_version"])
	if i, isInt := v.Int64(); !ok || !isInt || i != Version {
		return nil, fmt.Errorf("%w: data.ito.config.facts.model_version is %v, this itogate computes version %d",
			ErrVersion, facts["model_version"], Version)
	}
	m := &Model{}
	m.readParallelism(&r, r.obj(cfg, "parallelism"), r.obj(tables, "gpus"), r.obj(tables, "fabrics"))
	m.readCheckpoint(&r, r.obj(cfg, "checkpoint"), r.obj(tables, "storage"))
	m.readBudget(&r, r.obj(cfg, "budget"))
	m.readCredentials(&r, r.obj(r.obj(cfg, "data"), "credentials"))
	m.readManifest(&r, r.obj(cfg, "manifest"))
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

// Version is the facts-model version the model computes.
func (m *Model) Version() int { return Version }

// Compute returns input.facts for a policy input document (its manifest,
// entitlement and now; docs/policy-input.md): the version and the
// credential scan (of the manifest as written), and for a train.create and
// a train.stage.advance the field check of the manifest as written and the
// parallelism, checkpoint and budget facts of the manifest (for the
// advance, of the effective manifest of the stage it enters:
// StageManifest; the fixer gets that manifest too). A strict built-in
// error the Rego reference would raise (a division by zero) is returned as
// an error: the decision fails closed.
func (m *Model) Compute(doc map[string]any) (map[string]any, error) {
	manifest, hasManifest := doc["manifest"]
	// the credential scan for every action (the log mask reads the data
	// gate's denies whatever the action); the other gates that read the
	// facts run for train.create only (lib.is_train_create)
	out := map[string]any{
		"version":     Version,
		"credentials": map[string]any{"by_path": m.credentials(manifest, hasManifest)},
	}
	if action, _ := at(doc, "request", "action"); action != "train.create" && action != StageAction {
		return out, nil
	}
	// the field check of the manifest as written (the manifest gate judges
	// input.manifest, an advance too); the figures below are of the
	// effective manifest
	out["manifest"] = m.invalidFields(manifest)
	doc = stageDoc(doc)
	in := newInput(doc)
	c := &regonum.Calc{}
	par := m.parallelism(c, in)
	ckpt := m.checkpoint(c, in)
	budget := m.budgetFacts(c, in, ckpt)
	if c.Err != nil {
		return nil, fmt.Errorf("trainfacts: %w", c.Err)
	}
	parFacts := par.facts()
	if m.fixer != nil {
		if fix := m.fixer.Fix(doc); fix != nil {
			parFacts["fix"] = fix
		}
	}
	out["parallelism"] = parFacts
	out["checkpoint"] = ckpt.facts()
	out["budget"] = budget.facts()
	return out, nil
}

// reader reads bundle data, keeping the first problem: a value of another
// type than the formulas take. A missing value reads as undefined (an empty
// object, an undefined number), as in Rego.
type reader struct {
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("trainfacts: bundle data: "+format, args...)
	}
}

func (r *reader) obj(m map[string]any, key string) map[string]any {
	v, ok := m[key]
	if !ok {
		return nil
	}
	o, ok := v.(map[string]any)
	if !ok {
		r.fail("%s is not an object", key)
	}
	return o
}

// arr is the array at key (nil when absent); another type fails r, the
// message naming it as what.
func (r *reader) arr(m map[string]any, key, what string) []any {
	v, ok := m[key]
	if !ok {
		return nil
	}
	a, ok := v.([]any)
	if !ok {
		r.fail("%s is not an array", what)
	}
	return a
}

func (r *reader) num(m map[string]any, key string) regonum.Num {
	v, ok := m[key]
	if !ok {
		return regonum.Num{}
	}
	n, ok := regonum.Of(v)
	if !ok {
		r.fail("%s is not a number", key)
	}
	return regonum.Const(n.String())
}

// readRows reads tables.<table> (rows, by name) as rows of objects, each
// made by row; a row that is not an object fails r.
func readRows[T any](r *reader, table string, rows map[string]any, row func(map[string]any) T) map[string]T {
	out := make(map[string]T, len(rows))
	for name, v := range rows {
		o, ok := v.(map[string]any)
		if !ok {
			r.fail("tables.%s[%s] is not an object", table, name)
			return out
		}
		out[name] = row(o)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ParallelismFacts is input.facts.parallelism alone (without a fix) for a
// policy input document: how a layout search computes the exact facts of a
// layout it proposes, for the bundle's rules to confirm it.
func (m *Model) ParallelismFacts(doc map[string]any) (map[string]any, error) {
	c := &regonum.Calc{}
	par := m.parallelism(c, newInput(doc))
	if c.Err != nil {
		return nil, fmt.Errorf("trainfacts: %w", c.Err)
	}
	return par.facts(), nil
}
