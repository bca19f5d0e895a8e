package policy

import (
	"context"
	"errors"
	"math"
	"slices"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/plan"
	"github.com/itocompute/itogate/internal/regonum"
)

// PlanInput builds the policy input document (docs/policy-input.md,
// without input.facts) under which a proposed manifest is judged: the
// caller's entitlement and the booking's usage on the server, the offline
// defaults for `itogate plan`. An error skips the proposal (a manifest the
// schema refuses).
type PlanInput func(manifest map[string]any) (map[string]any, error)

// Plan is one proposed layout, admitted by the bundle's full decision.
type Plan struct {
	// Rank is the plan's place, 1 first, among the admitted plans.
	Rank   int         `json:"rank"`
	Layout plan.Layout `json:"layout"`
	// ChangedKnobs counts the knobs changed from the manifest's layout.
	ChangedKnobs int           `json:"changed_knobs"`
	Estimates    PlanEstimates `json:"estimates"`
	// Explanation compares the plan with the manifest's own layout by the
	// search's estimates (plan.Explain).
	Explanation string `json:"explanation"`
	// Warnings are the decision's warnings for the proposed manifest.
	Warnings []api.Finding `json:"warnings"`
	// Manifest is the full manifest proposed: the input manifest with the
	// layout written in (plan.Apply).
	Manifest map[string]any `json:"manifest"`
}

// PlanEstimates are a plan's figures. Memory, bubble and communication are
// the policy's exact facts of the proposed manifest (rounded to 2
// decimals); step time, throughput, GPU-hours and money are the search's
// estimates; the checkpoint figures are the policy's checkpoint model.
type PlanEstimates struct {
	WorldSize           int     `json:"world_size"`
	DataParallel        int     `json:"data_parallel"`
	Microbatches        int     `json:"microbatches"`
	MemoryGBPerGPU      float64 `json:"memory_gb_per_gpu"`
	MemoryMarginGB      float64 `json:"memory_margin_gb"`
	GPUMemoryGB         float64 `json:"gpu_memory_gb"`
	ModelStatesGBPerGPU float64 `json:"model_states_gb_per_gpu"`
	BubbleFraction      float64 `json:"bubble_fraction"`
	DPCommComputeRatio  float64 `json:"dp_comm_compute_ratio"`
	// ModelParallelCommSeconds is the step's tensor, pipeline, context and
	// expert parallel traffic by the search's model.
	ModelParallelCommSeconds float64 `json:"model_parallel_comm_seconds"`
	StepSeconds              float64 `json:"step_seconds"`
	TokensPerSecond          float64 `json:"tokens_per_second"`
	// GPUHours is step_seconds × objective.max_steps × world size / 3600
	// (absent without max_steps); USD prices them, and the GPU-hours
	// expected lost to failures (GPUHours × expected_lost_fraction), at the
	// entitlement's price per GPU-hour (absent without one).
	GPUHours *float64 `json:"gpu_hours,omitempty"`
	USD      *float64 `json:"usd,omitempty"`
	// Checkpoint figures (input.facts.checkpoint of the proposed manifest,
	// the checkpoint gate's model: the entitlement's signed telemetry when
	// it is used, else bundle data): the interval, the work lost per
	// failure, the expected lost share of the run, goodput = max(0, 1 −
	// that share) (4 decimals), and where the failure rate came from
	// ("telemetry" or "bundle").
	CheckpointIntervalSeconds *float64 `json:"checkpoint_interval_seconds,omitempty"`
	LostSecondsPerFailure     *float64 `json:"expected_lost_seconds_per_failure,omitempty"`
	LostFraction              *float64 `json:"expected_lost_fraction,omitempty"`
	Goodput                   *float64 `json:"goodput,omitempty"`
	FailureRateSource         string   `json:"failure_rate_source,omitempty"`
}

// PlanResult is a plan search's answer.
type PlanResult struct {
	Plans []Plan `json:"plans"`
	// ManifestLayout is the manifest's own layout as the search judged it:
	// its place among the candidates by the same ranking (0 when it is not
	// one: a hard rule or the memory margin fails it), and its estimates.
	ManifestLayout ManifestLayout `json:"manifest_layout"`
	// OnBookedHardware is false when the plans are on another node count
	// (none on the booked one passes); SearchedNodes lists those searched.
	OnBookedHardware bool  `json:"on_booked_hardware"`
	SearchedNodes    []int `json:"searched_nodes"`
	// Candidates counts the layouts that passed the search's model;
	// Evaluated those whose figures it computed.
	Candidates int `json:"candidates"`
	Evaluated  int `json:"evaluated"`
	// BudgetExceeded: the search stopped at its budget (max_candidates
	// evaluated layouts, or confirm_attempts per plan without an admitted
	// one); the plans are the best found before it.
	BudgetExceeded bool `json:"budget_exceeded"`
	// Refusals says why proposals were not admitted: the findings of the
	// decisions that refused them, one per code (the first seen, in the
	// order seen), at most MaxPlanRefusals, without the confirmation gate's
	// (a proposal has no confirmation yet). Empty when every proposal
	// judged was admitted. A finding that refuses every proposal whatever
	// its layout (an entitlement's malformed telemetry, a revoked booking)
	// is why a search spends its budget and returns no plan.
	Refusals       []api.Finding `json:"refusals"`
	BundleRevision string        `json:"bundle_revision"`
	BundleDigest   string        `json:"bundle_digest"`
}

// ManifestLayout is the declared layout in a plan's answer.
type ManifestLayout struct {
	Layout        plan.Layout   `json:"layout"`
	CandidateRank int           `json:"candidate_rank"`
	Figures       *plan.Figures `json:"figures,omitempty"`
}

// MaxPlanRefusals bounds PlanResult.Refusals.
const MaxPlanRefusals = 16

// ErrNoPlanner: the engine's bundle has no planner (a SkipRequiredRules
// bundle without the plan's data).
var ErrNoPlanner = errors.New("policy: the bundle has no layout planner")

// Plan searches the layouts of manifest on its hardware (gatekeeper/plan,
// Plan mode: fp8 where the GPU has it, recompute off allowed), ranks them
// by GPU time per step, and returns up to the bundle's plans count of them,
// each proposed manifest judged by the full decision under build's input
// with this engine's facts; admitted says whether a decision admits it
// (an allow offline; on the server an allow but for the confirmation the
// caller has yet to obtain for the proposed manifest). Plan writes
// nothing and consumes nothing. Errors are *Error (the bundle past its
// maximum age, a timeout of one decision) or ErrNoPlanner.
func (e *Engine) Plan(ctx context.Context, manifest map[string]any, build PlanInput, admitted func(Decision) bool) (PlanResult, error) {
	if e.planner == nil || e.base == nil {
		return PlanResult{}, ErrNoPlanner
	}
	res := e.planner.Search(manifest, plan.Plan)
	out := PlanResult{
		Plans: []Plan{}, Refusals: []api.Finding{}, OnBookedHardware: res.OnBookedHardware, SearchedNodes: res.SearchedNodes,
		Candidates: len(res.Candidates), Evaluated: res.Evaluated, BudgetExceeded: res.Truncated,
		BundleRevision: e.revision, BundleDigest: e.digest,
		ManifestLayout: ManifestLayout{Layout: res.Manifest},
	}
	if out.SearchedNodes == nil {
		out.SearchedNodes = []int{}
	}
	for i, c := range res.Candidates {
		if c.Layout == res.Manifest {
			f := c.Figures
			out.ManifestLayout.CandidateRank, out.ManifestLayout.Figures = i+1, &f
			break
		}
	}
	attempts := e.planner.Plans() * e.planner.ConfirmAttempts()
	for _, c := range res.Candidates {
		if len(out.Plans) == e.planner.Plans() {
			break
		}
		if slices.ContainsFunc(out.Plans, func(p Plan) bool { return plan.SameShape(p.Layout, c.Layout) }) {
			continue // one plan per shape: its best ZeRO stage and recompute
		}
		if attempts == 0 {
			out.BudgetExceeded = true
			break
		}
		attempts--
		proposed := plan.Apply(manifest, c.Layout)
		doc, err := build(proposed)
		if err != nil {
			continue
		}
		facts, err := e.base.Compute(doc)
		if err != nil {
			continue
		}
		doc["facts"] = facts
		d, err := e.Decide(ctx, doc)
		if err != nil {
			var pe *Error
			if errors.As(err, &pe) && (pe.Code == api.CodePolicyTimeout || pe.Code == api.CodePolicyBundleStale) {
				return PlanResult{}, err
			}
			continue
		}
		if !admitted(d) {
			out.Refusals = refusals(out.Refusals, d.Violations)
			continue
		}
		out.Plans = append(out.Plans, Plan{
			Rank: len(out.Plans) + 1, Layout: c.Layout, ChangedKnobs: c.Distance,
			Explanation: plan.Explain(c, res.Manifest, out.ManifestLayout.Figures),
			Estimates:   planEstimates(c, facts, manifest), Warnings: d.Warnings, Manifest: proposed,
		})
	}
	return out, nil
}

// refusals adds to seen the findings of vs whose code it lacks, but the
// confirmation gate's, up to MaxPlanRefusals.
func refusals(seen []api.Finding, vs []api.Finding) []api.Finding {
	for _, v := range vs {
		if len(seen) == MaxPlanRefusals {
			break
		}
		if v.Gate == "confirmation" || slices.ContainsFunc(seen, func(f api.Finding) bool { return f.Code == v.Code }) {
			continue
		}
		seen = append(seen, v)
	}
	return seen
}

func planEstimates(c plan.Candidate, facts map[string]any, manifest map[string]any) PlanEstimates {
	par, _ := facts["parallelism"].(map[string]any)
	rounded, _ := par["rounded"].(map[string]any)
	ckpt, _ := facts["checkpoint"].(map[string]any)
	budget, _ := facts["budget"].(map[string]any)
	f := c.Figures
	est := PlanEstimates{
		WorldSize: f.World, DataParallel: f.DP, Microbatches: f.Microbatches,
		MemoryGBPerGPU: numOf(rounded["memory_gb"]), ModelStatesGBPerGPU: numOf(rounded["model_states_gb"]),
		BubbleFraction: numOf(rounded["bubble"]), DPCommComputeRatio: numOf(rounded["comm_ratio"]),
		ModelParallelCommSeconds: r2(f.ModelParallelCommSeconds), StepSeconds: r2(f.StepSeconds),
	}
	est.GPUMemoryGB = c.GPUMemoryGB
	est.MemoryMarginGB = r2(c.MarginGB - est.MemoryGBPerGPU)
	obj, _ := manifest["objective"].(map[string]any)
	if f.StepSeconds > 0 {
		est.TokensPerSecond = math.Round(f.TokensPerGPU * float64(f.World) / f.StepSeconds)
	}
	if steps, ok := regonum.Of(obj["max_steps"]); ok {
		if n, isInt := steps.Int64(); isInt && n > 0 {
			h := r2(f.StepSeconds * float64(n) * float64(f.World) / 3600)
			est.GPUHours = &h
			if price, ok := regonum.Of(budget["price_micro_usd"]); ok {
				if p, isInt := price.Int64(); isInt {
					// the GPU-hours expected lost to failures are paid for too
					lost := 0.0
					if lf, ok := regonum.Of(ckpt["lost_fraction"]); ok {
						lost = numOf(lf.JSON())
					}
					usd := r2(h * (1 + lost) * float64(p) / 1e6)
					est.USD = &usd
				}
			}
		}
	}
	opt := func(v any) *float64 {
		n, ok := regonum.Of(v)
		if !ok {
			return nil
		}
		x := r2(numOf(n.JSON()))
		return &x
	}
	est.CheckpointIntervalSeconds = opt(ckpt["interval_seconds"])
	est.LostSecondsPerFailure = opt(ckpt["lost_seconds"])
	if lf, ok := regonum.Of(ckpt["lost_fraction"]); ok {
		lost := math.Round(numOf(lf.JSON())*1e4) / 1e4
		est.LostFraction = &lost
	}
	if g, ok := regonum.Of(ckpt["goodput"]); ok {
		good := math.Round(numOf(g.JSON())*1e4) / 1e4
		est.Goodput = &good
	}
	if src, ok := ckpt["failure_rate_source"].(string); ok {
		est.FailureRateSource = src
	}
	return est
}

func numOf(v any) float64 {
	n, ok := regonum.Of(v)
	if !ok {
		return 0
	}
	f, err := n.JSON().Float64()
	if err != nil {
		return 0
	}
	return f
}

func r2(x float64) float64 { return math.Round(x*100) / 100 }
