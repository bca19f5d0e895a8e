package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/inert"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/scenario"
)

type planOptions struct {
	manifestPath    string
	entitlementFile string
	bundleDir       string
	now             int64
	jsonOut         bool
	nodes           int
	gpusPerNode     int
	gpuType         string
	fabric          string
	deadline        time.Duration
}

func newPlanCmd(stdout io.Writer) *cobra.Command {
	o := &planOptions{}
	cmd := &cobra.Command{
		Use:   "plan --manifest FILE",
		Short: "Propose ranked parallel layouts for a manifest, offline, each admitted by the policy",
		Long: `Search the parallel layouts of a manifest's model on its hardware (or the
hardware the flags give): tensor, pipeline, virtual, context and expert
parallel, the ZeRO/FSDP stage, recompute, micro batch and precision (fp8 where
the GPU has it), pruned by the parallelism gate's hard rules and the memory
margin, ranked by estimated GPU time per step. Each plan is the full manifest
with the layout written in, judged offline like "itogate eval" (signatures
ASSUMED verified, an entitlement for exactly the hardware at 2.49 USD per
GPU-hour unless --entitlement, a confirmation binding the proposed
manifest): only admitted manifests are listed. Nothing is written.

--entitlement FILE gives the entitlement's claims as a JSON object, as
"itogate eval --entitlement" does: claims, not a token, and like eval's
they are NOT verified (no signature or key is checked; the policy
still judges them: booking, hardware, price, freshness against --now).
Their telemetry claim, when the policy uses it, gives each plan's failure
rate, lost work (in USD) and goodput as POST /v1/plans does with the
booking's signed token (failure_rate_source "telemetry"). When no plan is
admitted, the entitlement gate's violations of the manifest itself, as eval
judges it (ENTITLEMENT_TELEMETRY_MALFORMED, _STALE, ...), are printed
(--json: entitlement_violations).

Exit status: 0 at least one plan, 2 no plan admitted, 4 bad input, 1 the
policy could not be evaluated.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), stdout) },
	}
	f := cmd.Flags()
	f.StringVar(&o.manifestPath, "manifest", "", "training manifest (JSON)")
	f.StringVar(&o.entitlementFile, "entitlement", "", "file holding entitlement claims as a JSON object, not verified (replaces the default; as eval)")
	f.StringVar(&o.bundleDir, "bundle-dir", "", "plan with this bundle directory instead of the embedded one")
	f.Int64Var(&o.now, "now", 0, "evaluation time, unix seconds (default: now)")
	f.BoolVar(&o.jsonOut, "json", false, "print the plans as JSON")
	f.IntVar(&o.nodes, "nodes", 0, "plan for this many nodes (default: the manifest's hardware.nodes)")
	f.IntVar(&o.gpusPerNode, "gpus-per-node", 0, "plan for this many GPUs per node (default: the manifest's)")
	f.StringVar(&o.gpuType, "gpu-type", "", "plan for this GPU type (default: the manifest's)")
	f.StringVar(&o.fabric, "fabric", "", "plan for this fabric (default: the manifest's)")
	f.DurationVar(&o.deadline, "deadline", policy.DefaultDeadline, "bound on each decision")
	readsFile(f, "manifest", "entitlement")
	annotate(f, "bundle-dir", valueReadsDir)
	_ = cmd.MarkFlagRequired("manifest")
	return cmd
}

func (o *planOptions) run(ctx context.Context, w io.Writer) error {
	raw, _, err := safefile.ReadManifest(o.manifestPath, manifest.MaxBytes)
	if err != nil {
		return err
	}
	doc, err := manifest.Parse(raw)
	if err != nil {
		return badInput(err)
	}
	if o.nodes < 0 || o.gpusPerNode < 0 {
		return badInput(errors.New("--nodes and --gpus-per-node must be positive"))
	}
	hw, _ := doc["hardware"].(map[string]any)
	if hw == nil {
		return badInput(errors.New("the manifest has no hardware"))
	}
	if o.nodes > 0 {
		hw["nodes"] = json.Number(fmt.Sprint(o.nodes))
	}
	if o.gpusPerNode > 0 {
		hw["gpus_per_node"] = json.Number(fmt.Sprint(o.gpusPerNode))
	}
	if o.gpuType != "" {
		hw["gpu_type"] = o.gpuType
	}
	if o.fabric != "" {
		hw["fabric"] = o.fabric
	}
	var ent map[string]any // nil: the default entitlement
	if o.entitlementFile != "" {
		if ent, err = readClaims(o.entitlementFile); err != nil {
			return badInput(err)
		}
	}
	now := evalTime(o.now)
	engine, err := offlineEngine(ctx, o.bundleDir, o.deadline)
	if err != nil {
		return err
	}
	res, err := engine.Plan(ctx, doc, scenario.OfflinePlanInput(doc, ent, now), func(d policy.Decision) bool { return d.Allow })
	if errors.Is(err, policy.ErrNoPlanner) {
		return badInput(err) // a --bundle-dir without data.ito.config.plan
	}
	if err != nil {
		return err
	}
	out := planOutput{PlanResult: res}
	if len(res.Plans) == 0 && ent != nil {
		if out.EntitlementViolations, err = entitlementViolations(ctx, engine, doc, ent, now); err != nil {
			return err
		}
	}
	if o.jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		printPlans(w, out)
	}
	if len(res.Plans) == 0 {
		return exitError{exitDenied}
	}
	return nil
}

// planOutput is what `itogate plan` prints: the plan search's answer and,
// when no plan is admitted under --entitlement, what the entitlement gate
// says of the manifest itself.
type planOutput struct {
	policy.PlanResult
	// EntitlementViolations are the entitlement gate's violations of the
	// manifest itself (with the hardware flags applied), judged as
	// `itogate eval --entitlement` judges it; only when no plan is
	// admitted under --entitlement, absent when there are none.
	EntitlementViolations []api.Finding `json:"entitlement_violations,omitempty"`
}

// entitlementViolations judges doc as `itogate eval` does with the
// entitlement claims ent (the default confirmation, nothing held) and
// returns the violations of the entitlement gate. Errors are the
// engine's (*policy.Error) or the manifest schema's.
func entitlementViolations(ctx context.Context, engine *policy.Engine, doc, ent map[string]any, now time.Time) ([]api.Finding, error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	parsed, err := manifest.Parse(raw)
	if err != nil {
		return nil, badInput(err)
	}
	d, err := engine.Decide(ctx, scenario.OfflineInput(raw, parsed, ent, nil, now, engine.Facts()))
	if err != nil {
		return nil, err
	}
	var out []api.Finding
	for _, v := range d.Violations {
		if v.Gate == "entitlement" {
			out = append(out, v)
		}
	}
	return out, nil
}

func printPlans(w io.Writer, out planOutput) {
	res := out.PlanResult
	t := inert.Text
	fmt.Fprintf(w, "%d plans (bundle %s; %d candidates passed the model of %d evaluated; offline: signatures assumed verified)\n\n",
		len(res.Plans), t(res.BundleRevision), res.Candidates, res.Evaluated)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tNODES\tTP\tPP\tV\tCP\tEP\tDP\tMBS\tZERO\tRECOMPUTE\tPRECISION\tMEM GB\tBUBBLE\tSTEP S\tTOKENS/S\tGPU-H\tUSD\tGOODPUT")
	opt := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	for _, p := range res.Plans {
		l, e := p.Layout, p.Estimates
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%v\t%v\t%v\t%v\t%s\t%s\t%s\n",
			p.Rank, l.Nodes, l.TP, l.PP, l.V, l.CP, l.EP, e.DataParallel, l.MBS, l.Zero, t(l.Checkpointing), t(l.Precision),
			e.MemoryGBPerGPU, e.BubbleFraction, e.StepSeconds, e.TokensPerSecond, opt(e.GPUHours), opt(e.USD), opt(e.Goodput))
	}
	tw.Flush()
	var sources []string
	for _, p := range res.Plans {
		if s := p.Estimates.FailureRateSource; s != "" && !slices.Contains(sources, s) {
			sources = append(sources, s)
		}
	}
	if len(sources) > 0 {
		fmt.Fprintf(w, "\nfailure rate (goodput, lost work in USD) from: %s\n", t(strings.Join(sources, ", ")))
	}
	m := res.ManifestLayout
	if m.CandidateRank > 0 {
		fmt.Fprintf(w, "\nthe manifest's own layout is candidate %d of %d by the same ranking (%v s per step)\n",
			m.CandidateRank, res.Candidates, roundTo2(m.Figures.StepSeconds))
	} else {
		fmt.Fprintln(w, "\nthe manifest's own layout is not a candidate: it fails a hard rule or the memory margin")
	}
	switch {
	case res.BudgetExceeded && len(res.Plans) == 0 && len(res.Refusals) > 0:
		fmt.Fprintln(w, "the search stopped at its budget: every proposal it judged was refused (below)")
	case res.BudgetExceeded:
		fmt.Fprintln(w, "the search stopped at its budget: these are the best plans found before it")
	}
	if len(res.Plans) == 0 && len(res.Refusals) > 0 {
		fmt.Fprintln(w, "\nwhy the proposals were refused (one finding per code):")
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		for _, f := range res.Refusals {
			fmt.Fprintf(tw, "REFUSED\t%s\t%s\t%s\n", t(string(f.Code)), t(f.Gate), t(f.Message))
		}
		tw.Flush()
	}
	if len(out.EntitlementViolations) > 0 {
		fmt.Fprintln(w, "\nthe entitlement refuses the manifest itself (as itogate eval --entitlement judges it):")
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		for _, f := range out.EntitlementViolations {
			fmt.Fprintf(tw, "VIOLATION\t%s\t%s\t%s\n", t(string(f.Code)), t(f.Gate), t(f.Message))
			if f.Fix != "" {
				fmt.Fprintf(tw, "\t\tfix\t%s\n", t(f.Fix))
			}
		}
		tw.Flush()
	}
}

func roundTo2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }
