package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/inert"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
)

type evalOptions struct {
	manifestPath     string
	entitlementFile  string
	confirmationFile string
	bundleDir        string
	now              int64
	jsonOut          bool
	heldGPUs         int
	released         bool
	deadline         time.Duration
}

func newEvalCmd(stdout io.Writer) *cobra.Command {
	o := &evalOptions{}
	cmd := &cobra.Command{
		Use:   "eval --manifest FILE",
		Short: "Print the policy decision for a manifest, offline, with estimates and fixes",
		Long: `Evaluate the policy for a manifest without a server, a ledger or signatures:
the manifest is schema-checked, signatures are ASSUMED verified, and the
entitlement (unless --entitlement gives claims as JSON) is a completed booking
of exactly the manifest's hardware at 2.49 USD per GPU-hour, of which
--held-gpus are held by other live runs (default none); the confirmation
(unless --confirmation) binds the manifest digest with cost = budget ceiling.
For reviewers and manifest authors: what would the gate say, and why.

Exit status: 0 allow, 2 deny (like "opa eval --fail-defined" users expect in
CI), 4 bad input (a flag, a refused or invalid file), 1 the policy could not
be evaluated.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), stdout) },
	}
	f := cmd.Flags()
	f.StringVar(&o.manifestPath, "manifest", "", "training manifest (JSON)")
	f.StringVar(&o.entitlementFile, "entitlement", "", "file holding entitlement claims as a JSON object (replaces the default)")
	f.StringVar(&o.confirmationFile, "confirmation", "", "file holding confirmation claims as a JSON object (replaces the default)")
	f.StringVar(&o.bundleDir, "bundle-dir", "", "evaluate this bundle directory instead of the embedded one")
	f.Int64Var(&o.now, "now", 0, "evaluation time, unix seconds (default: now)")
	f.BoolVar(&o.jsonOut, "json", false, "print the decision as JSON")
	f.IntVar(&o.heldGPUs, "held-gpus", 0, "GPUs the booking's live runs already hold (input.ledger.booking.held_gpus)")
	f.BoolVar(&o.released, "released", false, "the booking was released (input.ledger.booking.released)")
	f.DurationVar(&o.deadline, "deadline", policy.DefaultDeadline, "bound on the evaluation (the server's policy.deadline default)")
	readsFile(f, "manifest", "entitlement", "confirmation")
	annotate(f, "bundle-dir", valueReadsDir)
	_ = cmd.MarkFlagRequired("manifest")
	return cmd
}

func (o *evalOptions) run(ctx context.Context, w io.Writer) error {
	raw, digest, err := safefile.ReadManifest(o.manifestPath, manifest.MaxBytes)
	if err != nil {
		return err
	}
	doc, err := manifest.Parse(raw)
	if err != nil {
		return badInput(err)
	}
	now := evalTime(o.now)
	engine, err := offlineEngine(ctx, o.bundleDir, o.deadline)
	if err != nil {
		return err
	}
	input, err := o.input(raw, doc, now, engine.Facts())
	if err != nil {
		return badInput(err)
	}
	d, err := engine.Decide(ctx, input)
	if err != nil {
		return err
	}
	if o.jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"manifest_digest": digest, "bundle_revision": engine.Revision(), "decision": d}); err != nil {
			return err
		}
		if !d.Allow {
			return exitError{exitDenied}
		}
		return nil
	}
	verdict := "ALLOW"
	if !d.Allow {
		verdict = "DENY"
	}
	// The bundle (--bundle-dir), its findings and estimates, and the
	// manifest's values in them are from outside: printed inert.
	t := inert.Text
	fmt.Fprintf(w, "%s  %s  %s (bundle %s; offline: signatures assumed verified)\n\n", verdict, t(o.manifestPath), digest, t(engine.Revision()))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, group := range []struct {
		title string
		fs    []api.Finding
	}{{"VIOLATION", d.Violations}, {"WARNING", d.Warnings}} {
		for _, f := range group.fs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", group.title, t(string(f.Code)), t(f.Gate), t(f.Message))
			if f.Fix != "" {
				fmt.Fprintf(tw, "\t\tfix\t%s\n", t(f.Fix))
			}
		}
	}
	tw.Flush()
	if len(d.Estimates) > 0 {
		printDecisionEstimates(w, doc, d.Estimates)
	}
	if !d.Allow {
		return exitError{exitDenied}
	}
	return nil
}

// input is the offline policy input (scenario.OfflineFacts) of the
// manifest: an entitlement for exactly its hardware unless --entitlement,
// the default confirmation unless --confirmation, the booking's usage from
// --held-gpus and --released, and the training facts of the bundle that
// decides (model).
func (o *evalOptions) input(raw []byte, doc map[string]any, now time.Time, model *trainfacts.Model) (map[string]any, error) {
	if o.heldGPUs < 0 {
		return nil, errors.New("--held-gpus must not be negative")
	}
	ent := scenario.ExactEntitlementClaims(doc, now)
	var conf map[string]any
	var err error
	if o.entitlementFile != "" {
		if ent, err = readClaims(o.entitlementFile); err != nil {
			return nil, err
		}
	}
	if o.confirmationFile != "" {
		if conf, err = readClaims(o.confirmationFile); err != nil {
			return nil, err
		}
	}
	facts := scenario.OfflineFacts(raw, doc, ent, conf, now)
	facts.Ledger.Booking = &admission.BookingFacts{HeldGPUs: o.heldGPUs, Released: o.released}
	facts.Facts = model
	return facts.Document(), nil
}

// layoutRows pairs the requested layout's estimates (or manifest fields) with
// the fix's (estimates.fix_layout), one row per knob or figure.
var layoutRows = []struct{ label, estimate, manifest, fix string }{
	{"world size (GPUs)", "world_size", "", "world_size"},
	{"data parallel", "dp", "", "data"},
	{"tensor", "tp", "", "tensor"},
	{"pipeline", "pp", "", "pipeline"},
	{"virtual stages", "virtual_stages", "", "virtual_stages"},
	{"context", "cp", "", "context"},
	{"expert", "ep", "", "expert"},
	{"expert tensor", "etp", "", "expert_tensor"},
	{"micro batch", "", "objective.micro_batch_size", "micro_batch_size"},
	{"zero stage", "", "parallelism.zero_stage", "zero_stage"},
	{"checkpointing", "", "parallelism.activation_checkpointing", "activation_checkpointing"},
	{"precision", "", "parallelism.precision", "precision"},
	{"microbatches per step", "microbatches", "", "microbatches"},
	{"tokens per GPU per step", "tokens_per_gpu", "", ""},
	{"pipeline bubble", "bubble_fraction", "", "bubble_fraction"},
	{"model states GB/GPU", "model_states_gb_per_gpu", "", "model_states_gb_per_gpu"},
	{"activations GB/GPU", "activations_gb_per_gpu", "", ""},
	{"memory GB/GPU", "memory_gb_per_gpu", "", "memory_gb_per_gpu"},
	{"GPU memory GB", "gpu_memory_gb", "", ""},
	{"DP comm/compute", "dp_comm_compute_ratio", "", "dp_comm_compute_ratio"},
}

var costRows = []struct{ label, usd, micro string }{
	{"GPU-hours", "gpu_hours", ""},
	{"compute", "compute_cost_usd", "compute_cost_micro_usd"},
	{"checkpoint storage", "storage_cost_usd", "storage_cost_micro_usd"},
	{"egress GiB", "egress_gib", ""},
	{"egress", "egress_cost_usd", "egress_cost_micro_usd"},
	{"total (the confirmation must cover it)", "total_cost_usd", "total_cost_micro_usd"},
	{"incremental (beyond the booking)", "incremental_cost_usd", "incremental_cost_micro_usd"},
	{"seconds past the term end", "past_term_seconds", ""},
}

// printDecisionEstimates prints the layout (requested, and the fix when a
// parallelism rule denied), the cost in USD (rounded up to the cent, exact
// micro-USD beside it), and any other estimate.
func printDecisionEstimates(w io.Writer, doc map[string]any, est map[string]any) {
	shown := map[string]bool{"fix_layout": true}
	fix, _ := est["fix_layout"].(map[string]any)
	fmt.Fprintln(w, "\nLAYOUT")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	if fix != nil {
		where := "on the booked hardware"
		if fix["on_booked_hardware"] != true {
			where = fmt.Sprintf("on %s nodes", show(fix["nodes"]))
		}
		var changes []string
		list, _ := fix["changes"].([]any)
		for _, c := range list {
			changes = append(changes, show(c))
		}
		fmt.Fprintf(tw, "  \trequested\tfix (%s; changes: %s)\n", where, strings.Join(changes, ", "))
	}
	for _, r := range layoutRows {
		var req any
		switch {
		case r.estimate != "":
			req, shown[r.estimate] = est[r.estimate], true
		case r.manifest != "":
			req = lookup(doc, r.manifest)
		}
		if fix == nil {
			if req != nil {
				fmt.Fprintf(tw, "  %s\t%s\n", r.label, show(req))
			}
			continue
		}
		if req == nil {
			req = "-"
		}
		var fixed any = ""
		if r.fix != "" && fix[r.fix] != nil {
			fixed = fix[r.fix]
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.label, show(req), show(fixed))
	}
	if fix != nil && fix["tensor"] == nil {
		fmt.Fprintf(tw, "  (no layout found on nodes %s)\n", show(fix["searched_nodes"]))
	}
	tw.Flush()

	fmt.Fprintln(w, "\nCOST (USD rounded up to the cent; exact micro-USD)")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, r := range costRows {
		v, ok := est[r.usd]
		if !ok {
			continue
		}
		shown[r.usd] = true
		if r.micro != "" {
			shown[r.micro] = true
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.label, show(v), show(est[r.micro]))
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t\n", r.label, show(v))
	}
	tw.Flush()

	rest := map[string]any{}
	for k, v := range est {
		if !shown[k] {
			rest[k] = v
		}
	}
	if len(rest) > 0 {
		fmt.Fprintln(w, "\nOTHER ESTIMATES")
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		printEstimates(tw, "", rest)
		tw.Flush()
	}
}

// lookup reads a dotted path ("objective.micro_batch_size") from a decoded manifest.
func lookup(doc map[string]any, path string) any {
	var cur any = doc
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

func printEstimates(w io.Writer, prefix string, m map[string]any) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if sub, ok := m[k].(map[string]any); ok {
			printEstimates(w, prefix+k+".", sub)
			continue
		}
		fmt.Fprintf(w, "  %s%s\t%s\n", inert.Text(prefix), inert.Text(k), show(m[k]))
	}
}

// show is a value of the policy's estimates as text, inert.
func show(v any) string { return inert.Text(fmt.Sprint(v)) }

func readClaims(path string) (map[string]any, error) {
	raw, err := safefile.ReadFile(path, 64<<10)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
