// Package policy evaluates the admission decision of an OPA bundle.
//
// The query data.ito.admission.decision is prepared once per bundle and
// evaluated per request under a deadline. The result is treated defensively
// (docs/architecture.md §4): anything but a well-formed decision becomes an error with a
// stable code, and the caller denies.
//
// An Engine is immutable: one bundle, its revision and digest and, for a
// bundle with a maximum age, the instant after which it refuses to decide.
// Swapping bundles means building a new Engine and swapping a pointer
// (gatekeeper/bundle), so a request evaluates against exactly one Engine.
package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/plan"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/internal/regonum"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// Query is the entrypoint every bundle must define.
const Query = "data.ito.admission.decision"

// WorkloadQuery is the Kubernetes admission webhook's decision
// (gatekeeper/webhook). A bundle without it decides no workload: every
// review is denied with api.CodePolicyDecisionInvalid.
const WorkloadQuery = "data.ito.workload.decision"

// MaskQuery names the JSON pointers to remove from an input before it is
// written to the decision log (as OPA's system.log.mask). A bundle without
// it masks nothing; Go's guard still refuses secret-shaped events.
const MaskQuery = "data.ito.system.log.mask"

// evalQuery evaluates Query and MaskQuery in one pass over the same input.
// The mask reads the data gate's denies; a separate query evaluated that
// gate (a walk of the whole manifest) a second time, ~1.8 ms per admission.
// The comprehension keeps an undefined mask from making the decision
// undefined: it yields [] when undefined and [value] otherwise.
const evalQuery = "decision := " + Query + "; log_mask := [m | m := " + MaskQuery + "]"

// DefaultDeadline bounds one evaluation. The bundled policy evaluates in well
// under a millisecond; the deadline only stops a runaway bundle.
const DefaultDeadline = 250 * time.Millisecond

// ErrFactsModel: the bundle was written for another training-facts model
// than this itogate computes (trainfacts.Version), its tables are not the
// model's, or its facts reference (FactsReferenceQuery) computes other
// facts than Go's model on its samples, or cannot be checked
// (checkFactsReference); New refuses it, and the bundle is not activated.
var ErrFactsModel = errors.New("policy: the bundle's facts model is not this itogate's")

// Error is an evaluation that produced no usable decision. Code is one of
// api.CodePolicyNotReady, CodePolicyBundleStale, CodePolicyEvaluationFailed,
// CodePolicyTimeout, CodePolicyDecisionInvalid and CodePolicyFactsMismatch.
type Error struct {
	Code api.Code
	Err  error
}

func (e *Error) Error() string { return "policy: " + string(e.Code) + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Decision is a validated result of the entrypoint. Allow is true exactly
// when Violations is empty.
type Decision struct {
	Allow      bool           `json:"allow"`
	Violations []api.Finding  `json:"violations"`
	Warnings   []api.Finding  `json:"warnings"`
	Estimates  map[string]any `json:"estimates,omitempty"`
	// Halt is set when a deny says the request carried a verified eval
	// report, bound to the run and its stage, that fails the stage's gate:
	// a fact about the run, which the admission records as its halt.
	Halt *Halt `json:"halt,omitempty"`
	// BundleRevision and BundleDigest name the bundle that made this
	// decision (its Engine's Revision and Digest), for decision records.
	// They are not part of the policy's output.
	BundleRevision string `json:"-"`
	BundleDigest   string `json:"-"`
	// LogMask holds the JSON pointers (RFC 6901), sorted, that MaskQuery
	// names for the same input, evaluated in the same pass; empty when the
	// bundle defines no mask. LogMaskErr is set instead when the mask is not
	// a set of strings: the decision stands, its log event is dropped.
	LogMask    []string `json:"-"`
	LogMaskErr error    `json:"-"`
}

// Halt is a decision's halt: the evals of the stage's gate that failed or
// had no result, sorted, without repeats.
type Halt struct {
	FailedEvals []string `json:"failed_evals"`
}

// MaxHaltEvals bounds Halt.FailedEvals, MaxEvalNameLen each name.
const (
	MaxHaltEvals   = 64
	MaxEvalNameLen = 128
)

// Mask returns the decision's LogMask and LogMaskErr, so a Decision serves
// as the decisionlog.Masker for the input it was made on; input is unused.
func (d *Decision) Mask(_ context.Context, _ map[string]any) ([]string, error) {
	return d.LogMask, d.LogMaskErr
}

// Options configure an Engine. Give Bundle (a file tree) or Parsed (a bundle
// already read and verified, see gatekeeper/bundle), not both.
type Options struct {
	// Bundle is the bundle root: Rego modules, data.json files and an
	// optional .manifest. Test files (*_test.rego) are not loaded.
	Bundle fs.FS
	// Parsed is a bundle read by OPA's bundle.Reader. The Engine takes it
	// over: the caller must not use or modify it afterwards.
	Parsed *bundle.Bundle
	// Digest names the bundle, "sha256:<hex>"; required with Parsed (the
	// digest of the archive it was read from). With Bundle it defaults to
	// DigestFS.
	Digest string
	// Revision overrides the .manifest revision; when both are empty it is
	// a digest prefix.
	Revision string
	// Expires, when not zero, is the instant after which the Engine stops
	// deciding: Decide returns api.CodePolicyBundleStale (the bundle's maximum age).
	Expires time.Time
	// Now is the clock for Expires (default time.Now).
	Now func() time.Time
	// Deadline bounds each evaluation; zero means DefaultDeadline.
	Deadline time.Duration
	// SkipRequiredRules lifts the RequiredRules check and the check of
	// Go's facts against the bundle's reference (checkFactsReference), for tests that
	// evaluate small hand-made bundles (or an older commit's policies, which
	// declare no facts model: such an engine decides without input.facts).
	// Never set it for an enforced bundle.
	SkipRequiredRules bool
}

// Engine holds one prepared bundle. It is safe for concurrent use.
type Engine struct {
	facts    *trainfacts.Model // with the fixer, when the bundle has a planner
	base     *trainfacts.Model // without
	planner  *plan.Planner
	confirm  rego.PreparedEvalQuery
	query    rego.PreparedEvalQuery
	workload rego.PreparedEvalQuery
	report   rego.PreparedEvalQuery // ReportQuery
	keys     reviewKeys             // what DecideWorkload puts in input.review.keys
	devices  deviceAnnotations      // what DeviceAnnotation answers from
	revision string
	digest   string
	expires  time.Time
	now      func() time.Time
	deadline time.Duration
}

// New loads the bundle, compiles it once, checks Go's facts model against
// the bundle's reference (ErrFactsModel) and prepares the engine's queries
// on the compiled bundle.
func New(ctx context.Context, opts Options) (*Engine, error) {
	var b *bundle.Bundle
	digest := opts.Digest
	switch {
	case opts.Bundle != nil && opts.Parsed != nil:
		return nil, errors.New("policy: give Bundle or Parsed, not both")
	case opts.Parsed != nil:
		if digest == "" {
			return nil, errors.New("policy: a parsed bundle needs its digest")
		}
		b = opts.Parsed
	case opts.Bundle != nil:
		read, fsDigest, err := ReadFS(opts.Bundle)
		if err != nil {
			return nil, err
		}
		if digest == "" {
			digest = fsDigest
		}
		b = read
	default:
		return nil, errors.New("policy: no bundle")
	}
	if !opts.SkipRequiredRules {
		if err := requireRules(b, RequiredRules); err != nil {
			return nil, err
		}
	}
	// The training facts (input.facts) the bundle's gates read, from its own
	// tables: a bundle written for another facts model is refused here.
	facts, err := trainfacts.New(b.Data)
	switch {
	case err != nil && opts.SkipRequiredRules && !declaresFactsModel(b.Data):
		facts = nil
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrFactsModel, err)
	}
	revision := opts.Revision
	if revision == "" {
		revision = b.Manifest.Revision
	}
	if revision == "" {
		revision = digest[:min(len(digest), len("sha256:")+12)]
	}
	cb, err := compileBundle(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("policy: prepare: %w", err)
	}
	// Go's facts must be the bundle's own formulas' on its own tables
	// (an operator's rows included), not only on the tables the identity
	// tests ran on; a bundle without the formulas has nothing to hold
	// them to (its gates read Go's facts alone)
	if facts != nil && !opts.SkipRequiredRules && requireRules(b, []string{FactsReferenceQuery}) == nil {
		if err := checkFactsReference(ctx, cb, facts, b.Data); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrFactsModel, err)
		}
	}
	pq, err := cb.prepare(ctx, evalQuery)
	if err != nil {
		return nil, fmt.Errorf("policy: prepare: %w", err)
	}
	wq, err := cb.prepare(ctx, "decision := "+WorkloadQuery)
	if err != nil {
		return nil, fmt.Errorf("policy: prepare workload: %w", err)
	}
	rq, err := cb.prepare(ctx, "verdict := "+ReportQuery)
	if err != nil {
		return nil, fmt.Errorf("policy: prepare report verdict: %w", err)
	}
	d := opts.Deadline
	if d <= 0 {
		d = DefaultDeadline
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	e := &Engine{facts: facts, base: facts, query: pq, workload: wq, report: rq, keys: readReviewKeys(b, WorkloadQuery), revision: revision, digest: digest,
		devices: readDeviceAnnotations(b.Data), expires: opts.Expires, now: now, deadline: d}
	// The layout search (a deny's fix, plans), from the same tables; its
	// proposals are confirmed by the bundle's own rules (ConfirmQuery).
	if facts != nil {
		planner, err := plan.New(b.Data)
		switch {
		case errors.Is(err, plan.ErrNoData), err != nil && opts.SkipRequiredRules:
			// no planner: denies name no fix, Plan answers ErrNoPlanner
		case err != nil:
			return nil, fmt.Errorf("%w: %w", ErrFactsModel, err)
		default:
			cq, err := cb.prepare(ctx, "confirm := "+ConfirmQuery)
			if err != nil {
				return nil, fmt.Errorf("policy: prepare confirm: %w", err)
			}
			e.planner, e.confirm = planner, cq
			e.facts = facts.WithFixer(&fixer{planner: planner, base: facts, confirm: cq, deadline: d})
		}
	}
	return e, nil
}

// compiledBundle is a bundle compiled once, with the store its data was
// activated into: an Engine prepares all its queries (decision, workload,
// report verdict, confirmation) on one, so the bundle is compiled and held
// in memory once rather than once per query (as a rego.ParsedBundle per
// query would). The compiler is read-only once compiled, as OPA's server
// shares its own across concurrent queries.
type compiledBundle struct {
	compiler *ast.Compiler
	store    storage.Store
}

// compileBundle compiles b with no impure built-in (a bundle calling one
// fails here) and activates its data into a store that reads as AST values
// (tables and credential patterns are not converted from Go values on
// every evaluation).
func compileBundle(ctx context.Context, b *bundle.Bundle) (*compiledBundle, error) {
	store := inmem.NewWithOpts(inmem.OptReturnASTValuesOnRead(true))
	txn, err := store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return nil, err
	}
	var compiler *ast.Compiler
	// the compiler rego configures for these options (capabilities, rego
	// version, unsafe built-ins), captured rather than rebuilt by hand
	_, err = rego.New(
		rego.Query("true"),
		rego.ParsedBundle("itogate", b),
		rego.Store(store),
		rego.Transaction(txn),
		rego.UnsafeBuiltins(impureBuiltins()),
		rego.CompilerHook(func(c *ast.Compiler) { compiler = c }),
	).PrepareForEval(ctx)
	if err != nil {
		store.Abort(ctx, txn)
		return nil, err
	}
	if err := store.Commit(ctx, txn); err != nil {
		return nil, err
	}
	return &compiledBundle{compiler: compiler, store: store}, nil
}

// prepare prepares query on the compiled bundle, every query of an Engine
// alike: strict built-in errors (an error fails the evaluation closed
// instead of leaving a rule undefined) and no impure built-in in the query.
func (c *compiledBundle) prepare(ctx context.Context, query string) (rego.PreparedEvalQuery, error) {
	return rego.New(
		rego.Query(query),
		rego.Compiler(c.compiler),
		rego.Store(c.store),
		rego.StrictBuiltinErrors(true),
		rego.UnsafeBuiltins(impureBuiltins()),
	).PrepareForEval(ctx)
}

// impureBuiltins are OPA's non-deterministic built-ins: network (http.send,
// net.lookup_ip_addr), clock (time.now_ns, io.jwt.decode_verify), randomness
// (rand.intn, uuid.rfc4122) and the runtime (opa.runtime, whose env holds the
// process environment). Policies are pure (docs/architecture.md §4): a bundle calling one
// fails to compile, so it is never activated, never reaches the network and
// never copies the environment into a violation message.
func impureBuiltins() map[string]struct{} {
	out := map[string]struct{}{}
	for _, b := range ast.Builtins {
		if b.Nondeterministic {
			out[b.Name] = struct{}{}
		}
	}
	return out
}

// ReadFS reads a bundle file tree (tests excluded) as New does and returns
// it with its DigestFS.
func ReadFS(fsys fs.FS) (*bundle.Bundle, string, error) {
	digest, err := DigestFS(fsys)
	if err != nil {
		return nil, "", err
	}
	loader, err := bundle.NewFSLoader(withoutTests{fsys})
	if err != nil {
		return nil, "", fmt.Errorf("policy: bundle: %w", err)
	}
	b, err := bundle.NewCustomReader(loader).
		WithRegoVersion(ast.RegoV1).
		WithProcessAnnotations(true).
		Read()
	if err != nil {
		return nil, "", fmt.Errorf("policy: bundle: %w", err)
	}
	return &b, digest, nil
}

// declaresFactsModel reports whether bundle data names a facts-model version.
func declaresFactsModel(data map[string]any) bool {
	ito, _ := data["ito"].(map[string]any)
	cfg, _ := ito["config"].(map[string]any)
	facts, _ := cfg["facts"].(map[string]any)
	_, ok := facts["model_version"]
	return ok
}

// Facts is the training-facts model over this bundle's data: the input
// builder (admission.Input) computes input.facts with it for every
// decision this engine makes. Nil only for a SkipRequiredRules bundle that
// declares no facts model.
func (e *Engine) Facts() *trainfacts.Model { return e.facts }

// Revision is the bundle's .manifest revision, or a digest prefix for a
// bundle without one.
func (e *Engine) Revision() string { return e.revision }

// Digest is "sha256:<hex>": of the archive for a bundle read from a file or
// a bundle server, over the file names and contents (DigestFS) for a tree.
func (e *Engine) Digest() string { return e.digest }

// Expires is the instant after which Decide refuses (zero: never).
func (e *Engine) Expires() time.Time { return e.expires }

// Stale reports whether the bundle is past its maximum age at now.
func (e *Engine) Stale(now time.Time) bool {
	return !e.expires.IsZero() && now.After(e.expires)
}

// Decide evaluates the decision for input (the document of
// docs/policy-input.md). Errors are *Error with one of the codes above; a
// bundle past its maximum age decides nothing (api.CodePolicyBundleStale).
func (e *Engine) Decide(ctx context.Context, input map[string]any) (Decision, error) {
	if err := e.checkFacts(input); err != nil {
		return Decision{}, err
	}
	// the value rego.EvalInput would make of input, without its JSON-shaped copy
	parsed, err := inputValue(input)
	if err != nil {
		return Decision{}, &Error{Code: api.CodePolicyEvaluationFailed, Err: fmt.Errorf("input: %w", err)}
	}
	r, err := e.evalOne(ctx, e.query, rego.EvalParsedInput(parsed), "decision")
	if err != nil {
		return Decision{}, err
	}
	d, err := parseDecision(r.Bindings["decision"])
	if err != nil {
		return Decision{}, err
	}
	d.LogMask, d.LogMaskErr = parseMask(r.Bindings["log_mask"])
	d.BundleRevision, d.BundleDigest = e.revision, e.digest
	return d, nil
}

// checkFacts fails closed unless input.facts was computed by this engine's
// facts model: the version it computes and the bundle expects
// (api.CodePolicyFactsMismatch otherwise), and no strict built-in error on
// the way (api.CodePolicyEvaluationFailed, as the Rego reference would
// raise it).
func (e *Engine) checkFacts(input map[string]any) error {
	if e.facts == nil {
		return nil
	}
	facts, _ := input["facts"].(map[string]any)
	v, _ := regonum.Of(facts["version"])
	if i, ok := v.Int64(); !ok || i != int64(e.facts.Version()) {
		return &Error{Code: api.CodePolicyFactsMismatch,
			Err: fmt.Errorf("input.facts has facts-model version %v, bundle %s expects %d", facts["version"], e.revision, e.facts.Version())}
	}
	if msg, failed := facts["error"]; failed {
		return &Error{Code: api.CodePolicyEvaluationFailed, Err: fmt.Errorf("input.facts: %v", msg)}
	}
	return nil
}

// evalOne evaluates q for input under the engine's deadline and expects
// exactly one result. Errors are *Error: api.CodePolicyBundleStale past the bundle's
// maximum age, api.CodePolicyTimeout at the deadline, api.CodePolicyEvaluationFailed for any
// other evaluation error, api.CodePolicyDecisionInvalid when what ("decision") is
// undefined.
func (e *Engine) evalOne(ctx context.Context, q rego.PreparedEvalQuery, in rego.EvalOption, what string) (rego.Result, error) {
	if e.Stale(e.now()) {
		return rego.Result{}, &Error{Code: api.CodePolicyBundleStale,
			Err: fmt.Errorf("bundle %s passed its maximum age at %s", e.revision, e.expires.UTC().Format(time.RFC3339))}
	}
	ctx, cancel := context.WithTimeout(ctx, e.deadline)
	defer cancel()
	rs, err := q.Eval(ctx, in)
	if err != nil {
		var te *topdown.Error
		if errors.Is(ctx.Err(), context.DeadlineExceeded) ||
			(errors.As(err, &te) && te.Code == topdown.CancelErr) {
			return rego.Result{}, &Error{Code: api.CodePolicyTimeout, Err: fmt.Errorf("evaluation exceeded %s", e.deadline)}
		}
		return rego.Result{}, &Error{Code: api.CodePolicyEvaluationFailed, Err: err}
	}
	// OPA notices a cancelled context between expressions, through a
	// goroutine: an evaluation shorter than that can end after its deadline
	// without an error. Past the deadline it is a timeout all the same.
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return rego.Result{}, &Error{Code: api.CodePolicyTimeout, Err: fmt.Errorf("evaluation exceeded %s", e.deadline)}
	}
	if len(rs) != 1 {
		return rego.Result{}, &Error{Code: api.CodePolicyDecisionInvalid, Err: fmt.Errorf("%s is undefined", what)}
	}
	return rs[0], nil
}

// WorkloadDecision is a validated data.ito.workload.decision.
type WorkloadDecision struct {
	Decision
	// Bind is what an allowed, non-dry-run review records in the ledger:
	// "root" (bind the run to this object), "child" (add this object under
	// its bound owner), "leaf" (check a controller's Pod against its
	// owner's active root; nothing recorded unless that root becomes
	// active) or "none".
	Bind string
	// GPUs is the total the object asks for.
	GPUs int64
}

// DecideWorkload evaluates WorkloadQuery for input (docs/kubernetes.md),
// with the same deadline, staleness and error codes as Decide. It sets
// input.review.keys (replacing what is there) to the member names of
// input.review.object, at any depth, that the bundle's rules test (see
// reviewKeys): when input.review is a map, it is modified.
func (e *Engine) DecideWorkload(ctx context.Context, input map[string]any) (WorkloadDecision, error) {
	if rv, ok := input["review"].(map[string]any); ok {
		rv["keys"] = e.keys.of(rv["object"])
	}
	// The webhook's input is JSON-decoded values (json.Number), strings,
	// booleans and Go integers: converted to OPA's values directly, without
	// the JSON-shaped copy rego.EvalInput makes first to normalise other Go
	// types (any other type still takes that round trip, inside
	// InterfaceToValue). The admission's input keeps rego.EvalInput.
	parsed, err := ast.InterfaceToValue(input)
	if err != nil {
		return WorkloadDecision{}, &Error{Code: api.CodePolicyEvaluationFailed, Err: fmt.Errorf("input: %w", err)}
	}
	r, err := e.evalOne(ctx, e.workload, rego.EvalParsedInput(parsed), "workload decision")
	if err != nil {
		return WorkloadDecision{}, err
	}
	raw := r.Bindings["decision"]
	d, err := parseDecision(raw)
	if err != nil {
		return WorkloadDecision{}, err
	}
	obj := raw.(map[string]any)
	wd := WorkloadDecision{Decision: d}
	switch b, _ := obj["bind"].(string); b {
	case "root", "child", "leaf", "none":
		wd.Bind = b
	default:
		return WorkloadDecision{}, &Error{Code: api.CodePolicyDecisionInvalid, Err: errors.New("bind is not root, child, leaf or none")}
	}
	switch g := obj["gpus"].(type) {
	case json.Number:
		n, err := g.Int64()
		if err != nil || n < 0 {
			return WorkloadDecision{}, &Error{Code: api.CodePolicyDecisionInvalid, Err: errors.New("gpus is not a non-negative integer")}
		}
		wd.GPUs = n
	default:
		return WorkloadDecision{}, &Error{Code: api.CodePolicyDecisionInvalid, Err: errors.New("gpus is not a number")}
	}
	wd.BundleRevision, wd.BundleDigest = e.revision, e.digest
	return wd, nil
}

// parseMask reads the log_mask binding of evalQuery: [] (no mask rule) or
// [set of strings]. Anything else is an error, and the caller drops the log
// event rather than log an input the policy meant to mask.
func parseMask(v any) ([]string, error) {
	wrapped, ok := v.([]any)
	if !ok || len(wrapped) > 1 {
		return nil, errors.New("policy: mask is not a set of strings")
	}
	if len(wrapped) == 0 {
		return nil, nil
	}
	arr, ok := wrapped[0].([]any)
	if !ok {
		return nil, errors.New("policy: mask is not a set of strings")
	}
	out := make([]string, 0, len(arr))
	for _, v := range arr {
		s, ok := v.(string)
		if !ok {
			return nil, errors.New("policy: mask is not a set of strings")
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out, nil
}

func parseDecision(v any) (Decision, error) {
	invalid := func(why string) (Decision, error) {
		return Decision{}, &Error{Code: api.CodePolicyDecisionInvalid, Err: errors.New(why)}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return invalid("decision is not an object")
	}
	allow, ok := obj["allow"].(bool)
	if !ok {
		return invalid("allow is not a boolean")
	}
	violations, err := findings(obj["violations"], true)
	if err != nil {
		return invalid("violations: " + err.Error())
	}
	warnings, err := findings(obj["warnings"], false)
	if err != nil {
		return invalid("warnings: " + err.Error())
	}
	if allow != (len(violations) == 0) {
		return invalid("allow disagrees with violations")
	}
	d := Decision{Allow: allow, Violations: violations, Warnings: warnings}
	if est, ok := obj["estimates"].(map[string]any); ok {
		d.Estimates = est
	}
	if h, present := obj["halt"]; present {
		if allow {
			return invalid("halt on an allow")
		}
		halt, err := parseHalt(h)
		if err != nil {
			return invalid("halt: " + err.Error())
		}
		d.Halt = halt
	}
	return d, nil
}

// parseHalt reads {"failed_evals": [name, ...]}: 1 to MaxHaltEvals names of
// at most MaxEvalNameLen bytes of letters, digits, '_', '-', '.' or ':'.
func parseHalt(v any) (*Halt, error) {
	obj, ok := v.(map[string]any)
	if !ok || len(obj) != 1 {
		return nil, errors.New(`not {"failed_evals": [...]}`)
	}
	arr, ok := obj["failed_evals"].([]any)
	if !ok || len(arr) == 0 || len(arr) > MaxHaltEvals {
		return nil, fmt.Errorf("failed_evals is not an array of 1 to %d names", MaxHaltEvals)
	}
	names := make([]string, 0, len(arr))
	for _, e := range arr {
		name, ok := e.(string)
		if !ok || name == "" || len(name) > MaxEvalNameLen || strings.ContainsFunc(name, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.:", r))
		}) {
			return nil, errors.New("failed_evals holds something other than an eval name")
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return &Halt{FailedEvals: slices.Compact(names)}, nil
}

func findings(v any, required bool) ([]api.Finding, error) {
	if v == nil && !required {
		return []api.Finding{}, nil
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, errors.New("not an array")
	}
	out := make([]api.Finding, 0, len(arr))
	for _, item := range arr {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, errors.New("item is not an object")
		}
		code, _ := m["code"].(string)
		gate, _ := m["gate"].(string)
		msg, _ := m["message"].(string)
		fix, _ := m["fix"].(string)
		if code == "" || gate == "" {
			return nil, errors.New("item without code or gate")
		}
		out = append(out, api.Finding{Code: api.Code(code), Gate: gate, Message: msg, Fix: fix})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Code != out[j].Code {
			return out[i].Code < out[j].Code
		}
		return out[i].Message < out[j].Message
	})
	return out, nil
}

// DigestFS hashes every bundle file (path, length, content; tests excluded)
// in lexical order, so two trees with the same digest hold the same policy
// and data.
func DigestFS(fsys fs.FS) (string, error) {
	var paths []string
	err := fs.WalkDir(withoutTests{fsys}, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("policy: bundle digest: %w", err)
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		f, err := fsys.Open(p)
		if err != nil {
			return "", fmt.Errorf("policy: bundle digest: %w", err)
		}
		data, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("policy: bundle digest: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(data))
		h.Write(data)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
