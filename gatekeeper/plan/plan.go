// Package plan searches parallel layouts for a training manifest: the fix a
// parallelism deny proposes (the nearest layout that passes, and the best)
// and the ranked layouts of `itogate plan` and POST /v1/plans.
//
// Candidates vary tensor, pipeline, virtual, context, expert and expert-
// tensor parallel, the ZeRO/FSDP stage, activation recompute, the micro
// batch and, for a plan, the precision (fp8 where the GPU has it). They keep
// the model, the global batch and the sequence. Each is pruned by the
// parallelism gate's hard rules (policies/ito/parallelism/rules.rego) and
// must fit GPU memory with the margin a declared layout needs (below
// memory_warn_fraction of the GPU's memory); the survivors are ranked by
// estimated step time and cost. The model is the gate's formulas in float64
// (model.go); every table, threshold and bound is read from the bundle's
// data (New), never from Go constants.
//
// The search only proposes. A caller returns a layout only after the
// bundle's own rules confirmed it on its exact facts (Confirmer): a
// proposal the policy rejects is never returned.
package plan

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Planner is the search over one bundle's data. Immutable; safe for
// concurrent use.
type Planner struct {
	cfg     config
	plan    planConfig
	gpus    map[string]gpuRow
	fabrics map[string]fabricRow
}

type config struct {
	overheadGB, statesFraction, memoryWarnFraction, memoryDenyNoCkpt float64
	bubbleWarn, bubbleDeny, commWarn, commDeny                       float64
	efficiency, mfu, zero3Factor, tokensDeny                         float64
	defaultZero, extraStages, cpMinSeq                               int
	maxChanged, maxExpert, minTokensPerCP, gpuProbes                 int
	pipelineDegrees, contextDegrees, virtualStages                   []int
}

// planConfig is data.ito.config.plan: what only the planner reads.
type planConfig struct {
	precisionSpeedup map[string]float64
	exposedComm      float64
	microBatches     []int
	maxCandidates    int
	plans            int
	confirmAttempts  int
}

type gpuRow struct {
	memoryGB, peakTFLOPS, intraGBps float64
	domain                          int
	precisions                      []string
}

type fabricRow struct{ gbpsPerGPU float64 }

// ErrData: the bundle's data holds a table or constant the search reads
// with another type than the search takes (a number written as a string).
var ErrData = errors.New("plan: bundle data")

// ErrNoData: the bundle's data lacks a table or constant the search reads
// (a bundle without data.ito.config.plan): it has no planner, its denies
// name no fix and it proposes no plans.
var ErrNoData = errors.New("plan: the bundle's data has no layout planner")

// New reads the search's tables and constants from a bundle's data document
// (the root of data: {"ito": {...}}): data.ito.config.parallelism (the
// gate's thresholds and fix_search bounds), data.ito.config.plan (the
// planner's own calibration) and data.ito.tables.{gpus,fabrics}.
func New(data map[string]any) (*Planner, error) {
	r := &reader{}
	ito := r.obj(data, "ito")
	cfgDoc := r.obj(r.obj(ito, "config"), "parallelism")
	search := r.obj(cfgDoc, "fix_search")
	planDoc := r.obj(r.obj(ito, "config"), "plan")
	tables := r.obj(ito, "tables")
	p := &Planner{
		cfg: config{
			overheadGB: r.num(cfgDoc, "memory_overhead_gb"), statesFraction: r.num(cfgDoc, "model_states_max_fraction"),
			memoryWarnFraction: r.num(cfgDoc, "memory_warn_fraction"),
			memoryDenyNoCkpt:   r.num(cfgDoc, "memory_deny_fraction_without_checkpointing"),
			bubbleWarn:         r.num(cfgDoc, "bubble_warn_above"), bubbleDeny: r.num(cfgDoc, "bubble_deny_above"),
			commWarn: r.num(cfgDoc, "dp_comm_warn_above"), commDeny: r.num(cfgDoc, "dp_comm_deny_above"),
			efficiency: r.num(cfgDoc, "bandwidth_efficiency"), mfu: r.num(cfgDoc, "model_flops_utilization"),
			zero3Factor: r.num(cfgDoc, "zero3_comm_factor"), tokensDeny: r.num(cfgDoc, "tokens_per_gpu_deny_below"),
			defaultZero: r.int(cfgDoc, "default_zero_stage"), extraStages: r.int(cfgDoc, "extra_pipeline_stages"),
			cpMinSeq:   r.int(cfgDoc, "context_parallel_min_sequence"),
			maxChanged: r.int(search, "max_changed_knobs"), maxExpert: r.int(search, "max_expert"),
			minTokensPerCP: r.int(search, "min_tokens_per_context_rank"), gpuProbes: r.int(search, "gpu_count_probes"),
			pipelineDegrees: r.ints(search, "pipeline_degrees"), contextDegrees: r.ints(search, "context_degrees"),
			virtualStages: r.ints(search, "virtual_stages"),
		},
		plan: planConfig{
			precisionSpeedup: map[string]float64{},
			exposedComm:      r.num(planDoc, "exposed_comm_fraction"),
			microBatches:     r.ints(planDoc, "micro_batch_sizes"),
			maxCandidates:    r.int(planDoc, "max_candidates"),
			plans:            r.int(planDoc, "plans"),
			confirmAttempts:  r.int(planDoc, "confirm_attempts"),
		},
		gpus:    map[string]gpuRow{},
		fabrics: map[string]fabricRow{},
	}
	speed := r.obj(planDoc, "precision_speedup")
	for k := range speed {
		p.plan.precisionSpeedup[k] = r.num(speed, k)
	}
	for name := range r.obj(tables, "gpus") {
		row := r.obj(r.obj(tables, "gpus"), name)
		g := gpuRow{memoryGB: r.num(row, "memory_gb"), peakTFLOPS: r.num(row, "peak_tflops_16bit"),
			intraGBps: r.num(row, "intra_node_gbytes_per_s"), domain: r.int(row, "nvlink_domain")}
		precs, _ := row["precisions"].([]any)
		for _, q := range precs {
			if s, ok := q.(string); ok {
				g.precisions = append(g.precisions, s)
			}
		}
		p.gpus[name] = g
	}
	for name := range r.obj(tables, "fabrics") {
		p.fabrics[name] = fabricRow{gbpsPerGPU: r.num(r.obj(r.obj(tables, "fabrics"), name), "gbytes_per_s_per_gpu")}
	}
	if r.err != nil {
		return nil, r.err
	}
	if r.missing != "" {
		return nil, fmt.Errorf("%w (no %s)", ErrNoData, r.missing)
	}
	if p.plan.maxCandidates < 1 || p.plan.plans < 1 || p.plan.confirmAttempts < 1 {
		return nil, fmt.Errorf("%w: data.ito.config.plan.max_candidates, plans and confirm_attempts must be positive", ErrData)
	}
	return p, nil
}

// reader reads bundle data, keeping the first value of another type
// (err) and the first missing one (missing).
type reader struct {
	err     error
	missing string
}

func (r *reader) absent(key string) {
	if r.missing == "" {
		r.missing = key
	}
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrData}, args...)...)
	}
}

func (r *reader) obj(m map[string]any, key string) map[string]any {
	v, has := m[key]
	if !has {
		r.absent(key)
		return nil
	}
	o, ok := v.(map[string]any)
	if !ok {
		r.fail("%s is not an object", key)
	}
	return o
}

func (r *reader) num(m map[string]any, key string) float64 {
	v, has := m[key]
	if !has {
		r.absent(key)
		return 0
	}
	f, ok := floatOf(v)
	if !ok {
		r.fail("%s is not a number", key)
	}
	return f
}

func (r *reader) int(m map[string]any, key string) int {
	f := r.num(m, key)
	if f != float64(int(f)) {
		r.fail("%s is not a whole number", key)
	}
	return int(f)
}

func (r *reader) ints(m map[string]any, key string) []int {
	v, has := m[key]
	if !has {
		r.absent(key)
		return nil
	}
	arr, ok := v.([]any)
	if !ok {
		r.fail("%s is not an array", key)
		return nil
	}
	out := make([]int, 0, len(arr))
	for _, v := range arr {
		n, ok := countOf(v)
		if !ok {
			r.fail("%s holds something other than a positive whole number", key)
		}
		out = append(out, n)
	}
	return out
}

// Candidate is a layout that passes the search's model, with its figures
// and its distance (changed knobs) from the manifest's layout.
type Candidate struct {
	Layout   Layout  `json:"layout"`
	Figures  Figures `json:"figures"`
	Distance int     `json:"changed_knobs"`
	// GPUSeconds is the step's cost: StepSeconds × world size.
	GPUSeconds float64 `json:"gpu_seconds_per_step"`
	// GPUMemoryGB is the GPU's memory, MarginGB the memory a layout may
	// use: memory_warn_fraction of it.
	GPUMemoryGB float64 `json:"gpu_memory_gb"`
	MarginGB    float64 `json:"memory_margin_gb"`
}

// Mode selects the candidates' precisions and checkpointing values.
type Mode int

const (
	// Fix keeps the manifest's precision (or the nearest one the GPU
	// supports) and never turns activation checkpointing off: the gate's
	// fix search.
	Fix Mode = iota
	// Plan also tries fp8 where the GPU has it and recompute off.
	Plan
)

// Result is one search.
type Result struct {
	// Candidates pass the model, best first by Mode's order: for Fix,
	// fewest changed knobs, then the gate's ranking (fewer waste warnings,
	// smaller bubble, no full recompute, less memory, less communication);
	// for Plan, least GPU time per step, then shortest step, then fewer
	// changed knobs. At most the bundle's max_candidates.
	Candidates []Candidate
	// Nodes is the node count the candidates are on (the booked one, or
	// the smallest probed one that has a passing layout).
	Nodes int
	// OnBookedHardware is false when no layout on the booked node count
	// passes and Candidates (if any) are on Nodes instead.
	OnBookedHardware bool
	// SearchedNodes are the node counts searched, the booked one first.
	SearchedNodes []int
	// Searchable is false when the GPU type, fabric or model figures are
	// unknown or inconsistent: no layout can be judged.
	Searchable bool
	// Truncated is set when the search stopped at the bundle's
	// max_candidates evaluated layouts: the answer is the best so far.
	Truncated bool
	// Evaluated counts the layouts whose figures were computed.
	Evaluated int
	// Manifest is the manifest's own layout (the reference a fix's
	// distance is counted from).
	Manifest Layout
}

// ManifestFails reports whether the manifest's own layout fails one of the
// gate's hard rules by the search's model, and whether it could be judged
// (false: the GPU, fabric or model figures are unknown). The decision path
// runs the fix search only when it does.
func (p *Planner) ManifestFails(manifest map[string]any) (fails, searchable bool) {
	pr := p.newProblem(manifest)
	if !pr.ok {
		return false, false
	}
	l := pr.layout
	if l.TP < 1 || l.PP < 1 || l.MBS < 1 || l.Nodes < 1 {
		return true, true
	}
	if !p.structural(&pr, l) {
		return true, true
	}
	f := p.figures(&pr, l)
	c := &p.cfg
	fails = f.TokensPerGPU < c.tokensDeny || f.Bubble > c.bubbleDeny ||
		f.StatesGB > c.statesFraction*pr.gpu.memoryGB-c.overheadGB ||
		(l.Checkpointing == "none" && f.MemoryGB > c.memoryDenyNoCkpt*pr.gpu.memoryGB) || f.CommRatio > c.commDeny
	return fails, true
}

// Search enumerates the layouts for manifest in mode on its booked hardware
// and, when none passes there, on up to fix_search.gpu_count_probes other
// node counts from the least that could hold the model states.
func (p *Planner) Search(manifest map[string]any, mode Mode) Result {
	pr := p.newProblem(manifest)
	res := Result{Searchable: pr.ok, OnBookedHardware: true, Nodes: pr.nodes, Manifest: pr.layout}
	if !pr.ok {
		return res
	}
	res.SearchedNodes = []int{pr.nodes}
	budget := p.plan.maxCandidates
	if p.canFit(&pr, pr.nodes) {
		res.Candidates = p.searchAt(&pr, pr.nodes, mode, &budget)
	}
	if len(res.Candidates) == 0 && budget > 0 {
		for _, n := range p.probeNodes(&pr) {
			res.SearchedNodes = append(res.SearchedNodes, n)
			if !p.canFit(&pr, n) {
				continue
			}
			if c := p.searchAt(&pr, n, mode, &budget); len(c) > 0 {
				res.Candidates, res.Nodes, res.OnBookedHardware = c, n, false
				break
			}
		}
		if len(res.Candidates) == 0 {
			res.OnBookedHardware = false
		}
	}
	res.Evaluated = p.plan.maxCandidates - budget
	res.Truncated = budget <= 0
	if mode == Fix {
		slices.SortStableFunc(res.Candidates, fixOrder)
	} else {
		slices.SortStableFunc(res.Candidates, planOrder)
	}
	return res
}

// fixOrder is the gate's fix ranking: fewest changed knobs, fewer waste
// warnings, smaller bubble, no full recompute, less memory, less
// communication.
func fixOrder(a, b Candidate) int {
	return cmp.Or(
		cmp.Compare(a.Distance, b.Distance),
		cmp.Compare(a.Figures.Warnings, b.Figures.Warnings),
		cmp.Compare(a.Figures.Bubble, b.Figures.Bubble),
		cmp.Compare(recompute(a.Layout), recompute(b.Layout)),
		cmp.Compare(a.Figures.MemoryGB, b.Figures.MemoryGB),
		cmp.Compare(a.Figures.CommRatio, b.Figures.CommRatio),
	)
}

// planOrder ranks by cost (GPU time per step), then step time, fewer
// warnings, fewer changed knobs, less memory.
func planOrder(a, b Candidate) int {
	return cmp.Or(
		cmp.Compare(a.GPUSeconds, b.GPUSeconds),
		cmp.Compare(a.Figures.StepSeconds, b.Figures.StepSeconds),
		cmp.Compare(a.Figures.Warnings, b.Figures.Warnings),
		cmp.Compare(a.Distance, b.Distance),
		cmp.Compare(a.Figures.MemoryGB, b.Figures.MemoryGB),
	)
}

// CostOrder is the plan ranking (least GPU time per step first), for
// ordering candidates a Fix search found.
func CostOrder(a, b Candidate) int { return planOrder(a, b) }

// Best is the candidate of least cost (GPU time per step), or false.
func (r Result) Best() (Candidate, bool) {
	if len(r.Candidates) == 0 {
		return Candidate{}, false
	}
	return slices.MinFunc(r.Candidates, planOrder), true
}

func recompute(l Layout) int {
	if l.Checkpointing == "full" {
		return 1
	}
	return 0
}

// canFit is _can_fit(nodes): enough tokens per GPU, and enough GPUs to hold
// the dense parameters' states at the least bytes per parameter.
func (p *Planner) canFit(pr *problem, nodes int) bool {
	world := nodes * pr.gpn
	if float64(pr.gbs)*float64(pr.seq)/float64(world) < p.cfg.tokensDeny {
		return false
	}
	return world >= p.minWorld(pr)
}

func (p *Planner) minWorld(pr *problem) int {
	b := 16.0
	if pr.bytesOverride > 0 {
		b = pr.bytesOverride
	}
	budget := p.cfg.statesFraction*pr.gpu.memoryGB - p.cfg.overheadGB
	if budget <= 0 {
		return int(^uint(0) >> 1)
	}
	return int(ceilDiv(b*pr.dense, budget*1e9))
}

func ceilDiv(a, b float64) float64 {
	q := a / b
	if q != float64(int64(q)) {
		return float64(int64(q) + 1)
	}
	return q
}

// probeNodes are the node counts other than the booked one to try, from the
// least that could hold the model states up to gpu_count_probes of them.
func (p *Planner) probeNodes(pr *problem) []int {
	minNodes := max(1, int(ceilDiv(float64(p.minWorld(pr)), float64(pr.gpn))))
	maxNodes := int(float64(pr.gbs) * float64(pr.seq) / (p.cfg.tokensDeny * float64(pr.gpn)))
	var out []int
	for n := minNodes; n <= min(maxNodes, minNodes+p.cfg.gpuProbes) && len(out) < p.cfg.gpuProbes; n++ {
		if n != pr.nodes {
			out = append(out, n)
		}
	}
	return out
}

// values are the candidate values of each knob (the gate's _x_values).
type values struct {
	tp, cp, pp, mbs, ep, etp, zero []int
	ckpt, precision                []string
}

func withValue(xs []int, x int) []int {
	if !slices.Contains(xs, x) {
		xs = append(xs, x)
	}
	return xs
}

func (p *Planner) values(pr *problem, nodes int, mode Mode) values {
	l := pr.layout
	var v values
	for _, t := range withValue([]int{l.TP}, 1) {
		v.tp = withValue(v.tp, t)
	}
	for d := 1; d <= pr.gpu.domain; d++ {
		if pr.gpu.domain%d == 0 {
			v.tp = withValue(v.tp, d)
		}
	}
	v.cp = withValue([]int{1}, l.CP)
	if pr.seq >= p.cfg.cpMinSeq {
		for _, d := range p.cfg.contextDegrees {
			if pr.seq/d >= p.cfg.minTokensPerCP && pr.seq%d == 0 {
				v.cp = withValue(v.cp, d)
			}
		}
	}
	world := nodes * pr.gpn
	for _, d := range append([]int{l.PP}, p.cfg.pipelineDegrees...) {
		if world%d == 0 && d <= pr.layers+p.cfg.extraStages {
			v.pp = withValue(v.pp, d)
		}
	}
	v.mbs = withValue([]int{1}, l.MBS)
	if mode == Plan {
		for _, m := range p.plan.microBatches {
			v.mbs = withValue(v.mbs, m)
		}
	}
	v.ep = []int{l.EP}
	if pr.hasMoE {
		for e := 1; e <= min(pr.experts, p.cfg.maxExpert); e++ {
			if pr.experts%e == 0 {
				v.ep = withValue(v.ep, e)
			}
		}
	}
	v.etp = withValue([]int{1}, l.ETP)
	v.zero = []int{0, 1, 2, 3}
	v.ckpt = []string{l.Checkpointing}
	for _, c := range []string{"selective", "full"} {
		if !slices.Contains(v.ckpt, c) {
			v.ckpt = append(v.ckpt, c)
		}
	}
	if mode == Plan && !slices.Contains(v.ckpt, "none") {
		v.ckpt = append(v.ckpt, "none")
	}
	v.precision = []string{p.fixPrecision(pr)}
	if mode == Plan && v.precision[0] != "" {
		for _, q := range []string{"fp8"} {
			if pr.supports(q) && !slices.Contains(v.precision, q) && precisionRank[q] < precisionRank[v.precision[0]] {
				v.precision = append(v.precision, q)
			}
		}
	}
	return v
}

// precisionRank orders precisions from the narrowest; fp8 is chosen "up"
// only from a wider 16- or 32-bit precision.
var precisionRank = map[string]int{"nvfp4": 0, "mxfp8": 1, "fp8": 2, "bf16": 3, "fp16": 4, "fp32": 5}

// fixPrecision is _fix_precision: the manifest's, or the nearest supported
// fallback.
func (p *Planner) fixPrecision(pr *problem) string {
	prec := pr.layout.Precision
	if !unsupported(pr, prec) {
		return prec
	}
	for _, q := range precisionFallbacks[prec] {
		if !unsupported(pr, q) {
			return q
		}
	}
	return ""
}

func unsupported(pr *problem, precision string) bool { return !pr.supports(precision) }

var precisionFallbacks = map[string][]string{
	"nvfp4": {"mxfp8", "fp8", "bf16", "fp16"},
	"mxfp8": {"fp8", "bf16", "fp16"},
	"fp8":   {"bf16", "fp16"},
	"bf16":  {"fp16"},
	"fp16":  {"fp32"},
}

// searchAt enumerates every layout on nodes, the integer rules first,
// spending one unit of budget per layout whose figures it computes.
func (p *Planner) searchAt(pr *problem, nodes int, mode Mode, budget *int) []Candidate {
	vals := p.values(pr, nodes, mode)
	if vals.precision[0] == "" {
		return nil
	}
	var out []Candidate
	world := nodes * pr.gpn
	for _, tp := range vals.tp {
		if tp > pr.gpu.domain || pr.heads%tp != 0 || (pr.kvHeads%tp != 0 && tp%pr.kvHeads != 0) {
			continue
		}
		for _, cp := range vals.cp {
			if cp > 1 && pr.seq%(2*cp) != 0 {
				continue
			}
			for _, pp := range vals.pp {
				if world%(tp*pp*cp) != 0 {
					continue
				}
				vs := []int{1}
				if pp > 1 {
					vs = withValue(vs, pr.layout.V)
					for _, d := range p.cfg.virtualStages {
						if pr.layers%(pp*d) == 0 {
							vs = withValue(vs, d)
						}
					}
				}
				for _, v := range vs {
					for _, mbs := range vals.mbs {
						for _, ep := range vals.ep {
							for _, etp := range vals.etp {
								for _, zero := range vals.zero {
									for _, ckpt := range vals.ckpt {
										for _, prec := range vals.precision {
											l := Layout{Nodes: nodes, TP: tp, PP: pp, CP: cp, EP: ep, ETP: etp, V: v, MBS: mbs,
												Zero: zero, Checkpointing: ckpt, Precision: prec, Schedule: pr.scheduleAt(v)}
											if !p.structural(pr, l) {
												continue
											}
											if *budget <= 0 {
												return out
											}
											*budget--
											f := p.figures(pr, l)
											if !p.passes(pr, l, f) {
												continue
											}
											out = append(out, Candidate{Layout: l, Figures: f, Distance: l.distance(pr.layout),
												GPUSeconds:  f.StepSeconds * float64(f.World),
												GPUMemoryGB: pr.gpu.memoryGB, MarginGB: p.cfg.memoryWarnFraction * pr.gpu.memoryGB})
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return out
}

// Plans is how many confirmed layouts a plan returns (data.ito.config.plan.plans).
func (p *Planner) Plans() int { return p.plan.plans }

// ConfirmAttempts bounds how many proposals are put to the bundle's rules
// for one answer (a fix's nearest or best layout, one plan slot) before the
// search reports none (data.ito.config.plan.confirm_attempts).
func (p *Planner) ConfirmAttempts() int { return p.plan.confirmAttempts }

// SameShape reports whether two layouts differ at most in the ZeRO stage
// and recompute: a plan lists one of each shape, its best.
func SameShape(a, b Layout) bool {
	a.Zero, a.Checkpointing = b.Zero, b.Checkpointing
	return a == b
}

// Explain says, in figures, why candidate c ranks where it does against
// the manifest's own layout m (its figures mf): the step time and its
// terms (compute with recompute, precision and bubble; exposed
// communication), and the layout knobs that differ.
func Explain(c Candidate, m Layout, mf *Figures) string {
	f := c.Figures
	if mf == nil {
		return fmt.Sprintf("%.2f s per step (compute %.2f s with the bubble, exposed communication %.2f s); "+
			"the manifest's own layout fails a hard rule or the memory margin", f.StepSeconds, f.PipelinedComputeSeconds, f.ExposedCommSeconds)
	}
	if c.Layout == m {
		return fmt.Sprintf("the manifest's own layout: %.2f s per step (compute %.2f s with the bubble, exposed communication %.2f s)",
			f.StepSeconds, f.PipelinedComputeSeconds, f.ExposedCommSeconds)
	}
	var changes []string
	add := func(name string, from, to any) {
		if from != to {
			changes = append(changes, fmt.Sprintf("%s %v → %v", name, from, to))
		}
	}
	add("nodes", m.Nodes, c.Layout.Nodes)
	add("tensor", m.TP, c.Layout.TP)
	add("pipeline", m.PP, c.Layout.PP)
	add("virtual_stages", m.V, c.Layout.V)
	add("context", m.CP, c.Layout.CP)
	add("expert", m.EP, c.Layout.EP)
	add("expert_tensor", m.ETP, c.Layout.ETP)
	add("micro_batch_size", m.MBS, c.Layout.MBS)
	add("zero_stage", m.Zero, c.Layout.Zero)
	add("activation_checkpointing", m.Checkpointing, c.Layout.Checkpointing)
	add("precision", m.Precision, c.Layout.Precision)
	return fmt.Sprintf("%.2f s per step against %.2f s for the manifest's layout (%+.1f%% GPU time): compute with the bubble "+
		"%.2f s against %.2f s (bubble %.3f against %.3f), exposed communication %.2f s against %.2f s; changes: %s",
		f.StepSeconds, mf.StepSeconds, 100*(c.GPUSeconds/(mf.StepSeconds*float64(mf.World))-1),
		f.PipelinedComputeSeconds, mf.PipelinedComputeSeconds, f.Bubble, mf.Bubble,
		f.ExposedCommSeconds, mf.ExposedCommSeconds, strings.Join(changes, ", "))
}
