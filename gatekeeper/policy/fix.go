package policy

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/itocompute/itogate/gatekeeper/plan"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/open-policy-agent/opa/v1/rego"
)

// ConfirmQuery is the narrow query by which the engine confirms a layout
// its search proposes: the parallelism gate's deny codes and memory margin
// for one manifest and its facts (policies/ito/parallelism/fix.rego).
const ConfirmQuery = "data.ito.parallelism.confirm"

// fixer is the decision path's fix (trainfacts.Fixer): when the search's
// model finds that the manifest's layout fails a hard rule, it searches
// the nearest and the best passing layouts (gatekeeper/plan) and keeps the
// first of each that the bundle's rules confirm on its exact facts. The
// search is bounded by the bundle's max_candidates and confirm_attempts,
// not by the policy deadline: a search past its budget says so in the fix,
// and the deny stands with its codes.
type fixer struct {
	planner  *plan.Planner
	base     *trainfacts.Model // computes candidates' facts (no fixer)
	confirm  rego.PreparedEvalQuery
	deadline time.Duration // each confirmation's bound
}

// Fix implements trainfacts.Fixer.
func (f *fixer) Fix(doc map[string]any) map[string]any {
	manifest, _ := doc["manifest"].(map[string]any)
	fails, searchable := f.planner.ManifestFails(manifest)
	if !fails || !searchable {
		return nil
	}
	res := f.planner.Search(manifest, plan.Fix)
	if !res.Searchable {
		return nil
	}
	nodes := make([]any, len(res.SearchedNodes))
	for i, n := range res.SearchedNodes {
		nodes[i] = json.Number(strconv.Itoa(n))
	}
	out := map[string]any{
		"on_booked_hardware": res.OnBookedHardware,
		"searched_nodes":     nodes,
		"evaluated":          json.Number(strconv.Itoa(res.Evaluated)),
	}
	// the parallelism gate reads these sections only: the proposals are
	// written into (and confirmed on) them, not copies of the whole manifest
	slim := map[string]any{}
	for _, k := range []string{"model", "hardware", "parallelism", "objective"} {
		if v, ok := manifest[k]; ok {
			slim[k] = v
		}
	}
	nearest, figs, ok := f.firstConfirmed(slim, res.Candidates)
	if !ok {
		if len(res.Candidates) > 0 || res.Truncated {
			out["budget_exceeded"] = true
		}
		return out
	}
	out["layout"] = LayoutValue(nearest.Layout)
	out["figures"] = figs
	byCost := slices.Clone(res.Candidates)
	slices.SortStableFunc(byCost, func(a, b plan.Candidate) int { return plan.CostOrder(a, b) })
	best, bfigs, ok := byCost[0], figs, true
	if best.Layout != nearest.Layout { // the nearest is confirmed already
		best, bfigs, ok = f.firstConfirmed(slim, byCost)
	}
	if ok {
		out["best"] = map[string]any{
			"layout": LayoutValue(best.Layout), "figures": bfigs,
			"estimates": map[string]any{"step_seconds": round2(best.Figures.StepSeconds)},
		}
	}
	return out
}

// firstConfirmed returns the first of candidates (at most confirm_attempts
// of them) that the bundle's rules confirm, with its figures as the fix
// shows them.
func (f *fixer) firstConfirmed(manifest map[string]any, candidates []plan.Candidate) (plan.Candidate, map[string]any, bool) {
	for i, c := range candidates {
		if i >= f.planner.ConfirmAttempts() {
			break
		}
		if figs, ok := f.confirmLayout(manifest, c.Layout); ok {
			return c, figs, true
		}
	}
	return plan.Candidate{}, nil, false
}

// confirmLayout computes the exact parallelism facts of manifest with
// layout l and evaluates ConfirmQuery on them: true when no parallelism
// rule denies and memory is within the margin.
func (f *fixer) confirmLayout(manifest map[string]any, l plan.Layout) (map[string]any, bool) {
	cand := plan.Apply(manifest, l)
	doc := map[string]any{"manifest": cand}
	pf, err := f.base.ParallelismFacts(doc)
	if err != nil {
		return nil, false
	}
	doc["facts"] = map[string]any{"version": json.Number(strconv.Itoa(f.base.Version())), "parallelism": pf}
	ctx, cancel := context.WithTimeout(context.Background(), f.deadline)
	defer cancel()
	if !confirmed(ctx, f.confirm, doc) {
		return nil, false
	}
	rounded, _ := pf["rounded"].(map[string]any)
	return map[string]any{
		"data": pf["dp"], "microbatches": pf["microbatches"], "bubble_fraction": rounded["bubble"],
		"model_states_gb_per_gpu": rounded["model_states_gb"], "memory_gb_per_gpu": rounded["memory_gb"],
		"dp_comm_compute_ratio": rounded["comm_ratio"],
	}, true
}

// confirmed evaluates the confirmation query on doc: no deny and memory
// within the margin. Any error or other shape is not a confirmation.
func confirmed(ctx context.Context, q rego.PreparedEvalQuery, doc map[string]any) bool {
	in, err := inputValue(doc)
	if err != nil {
		return false
	}
	rs, err := q.Eval(ctx, rego.EvalParsedInput(in))
	if err != nil || len(rs) != 1 {
		return false
	}
	c, _ := rs[0].Bindings["confirm"].(map[string]any)
	deny, isArr := c["deny"].([]any)
	over, isBool := c["memory_over_margin"].(bool)
	return isArr && isBool && len(deny) == 0 && !over
}

// LayoutValue is a layout as the policy reads it (a fix's layout:
// parallelism._manifest_layout's keys).
func LayoutValue(l plan.Layout) map[string]any {
	n := func(i int) json.Number { return json.Number(strconv.Itoa(i)) }
	return map[string]any{
		"nodes": n(l.Nodes), "tp": n(l.TP), "pp": n(l.PP), "cp": n(l.CP), "ep": n(l.EP), "etp": n(l.ETP),
		"v": n(l.V), "mbs": n(l.MBS), "zero_stage": n(l.Zero), "checkpointing": l.Checkpointing,
		"precision": l.Precision, "schedule": l.Schedule,
	}
}

// round2 is x rounded to 2 decimals, as a JSON number.
func round2(x float64) json.Number {
	return json.Number(strconv.FormatFloat(math.Round(x*100)/100, 'f', -1, 64))
}
