package plan

import (
	"encoding/json"
	"math"
	"strconv"
)

// The search's model: the parallelism gate's formulas (policies/ito/parallelism,
// computed exactly by gatekeeper/trainfacts) in float64, fast enough to
// judge tens of thousands of layouts. It only proposes: every layout the
// planner returns is confirmed on the exact facts by the bundle's own rules
// (Confirmer), so a rounding difference here can cost a candidate, never
// admit one.

// Layout is one parallel layout: the knobs the search varies. Schedule
// follows from V and the manifest's declared schedule; Precision is the
// manifest's or one the GPU supports.
type Layout struct {
	Nodes         int    `json:"nodes"`
	TP            int    `json:"tp"`
	PP            int    `json:"pp"`
	CP            int    `json:"cp"`
	EP            int    `json:"ep"`
	ETP           int    `json:"etp"`
	V             int    `json:"v"`
	MBS           int    `json:"mbs"`
	Zero          int    `json:"zero_stage"`
	Checkpointing string `json:"checkpointing"`
	Precision     string `json:"precision"`
	Schedule      string `json:"schedule"`
}

// knobs are the layout fields a fix's distance counts (precision and the
// schedule follow from the others or from the GPU).
func (l Layout) knobs() [9]any {
	return [9]any{l.TP, l.PP, l.CP, l.EP, l.ETP, l.V, l.MBS, l.Zero, l.Checkpointing}
}

// distance is the number of knobs in which l differs from m.
func (l Layout) distance(m Layout) int {
	a, b := l.knobs(), m.knobs()
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// Figures are one layout's estimates, by the gate's formulas.
type Figures struct {
	World        int     `json:"world_size"`
	DP           int     `json:"dp"`
	Microbatches int     `json:"microbatches"`
	TokensPerGPU float64 `json:"tokens_per_gpu"`
	StatesGB     float64 `json:"model_states_gb_per_gpu"`
	MemoryGB     float64 `json:"memory_gb_per_gpu"`
	Bubble       float64 `json:"bubble_fraction"`
	CommSeconds  float64 `json:"comm_seconds"`
	// ComputeSeconds is one step's compute per GPU at the model's FLOPs
	// utilisation (the gate's T_comp), before the precision speedup.
	ComputeSeconds float64 `json:"compute_seconds"`
	CommRatio      float64 `json:"dp_comm_compute_ratio"`
	// ModelParallelCommSeconds is the step's tensor, pipeline, context and
	// expert parallel traffic time (the planner's, not the gate's).
	ModelParallelCommSeconds float64 `json:"model_parallel_comm_seconds"`
	// PipelinedComputeSeconds is the compute with the precision's speedup,
	// stretched by the bubble: compute / (1 − bubble).
	PipelinedComputeSeconds float64 `json:"pipelined_compute_seconds"`
	// ExposedCommSeconds is exposed_comm_fraction of the data- and
	// model-parallel communication.
	ExposedCommSeconds float64 `json:"exposed_comm_seconds"`
	// StepSeconds is the search's step time: compute (with the precision's
	// speedup) stretched by the bubble, plus the exposed share of the
	// data-parallel communication.
	StepSeconds float64 `json:"step_seconds"`
	// Warnings counts the waste thresholds the layout is above (bubble,
	// memory, communication), as the fix's ranking does.
	Warnings int `json:"warnings"`
}

// problem is the manifest's model, objective and booking as the gate reads
// them: fixed for every layout.
type problem struct {
	gpn, nodes                                int
	heads, kvHeads, hidden, layers            int
	vocab, ffn                                float64
	params, expertParams, dense, active       float64
	hasMoE                                    bool
	experts, topK                             int
	gbs, seq                                  int
	engine                                    string
	megatron                                  bool
	gradBytes                                 float64
	bytesOverride                             float64 // 0: none
	splitFirst, splitLast, splitUnits         int     // 0: not declared
	declaredEnds, declaredEndLayers           int
	declaredSchedule                          string
	stageLayers                               []int // pipeline_split.stage_layers, nil: none
	hasStageLayers                            bool
	embeddingUnit, lossUnit                   int     // 1 when the split counts them as layers
	mlpWidth                                  float64 // ffn, or top_k × expert ffn + shared ffn
	megatronBytes                             [2]float64
	noSequenceParallel                        bool
	gpu                                       gpuRow
	fabricGBps                                float64
	layout                                    Layout // the manifest's own
	precisionSupported, hasGPU, hasFabric, ok bool
}

// newProblem reads the manifest as parallelism.rego does. ok is false when
// a field the formulas need is missing or ill-typed, or the model's own
// figures are inconsistent (no layout search then, as in the gate).
func (p *Planner) newProblem(m map[string]any) problem {
	var pr problem
	model, _ := m["model"].(map[string]any)
	hw, _ := m["hardware"].(map[string]any)
	par, _ := m["parallelism"].(map[string]any)
	obj, _ := m["objective"].(map[string]any)
	moe, _ := model["moe"].(map[string]any)
	if model == nil || hw == nil || par == nil || obj == nil {
		return pr
	}
	ok := true
	cnt := func(o map[string]any, k string, def int) int {
		v, has := o[k]
		if !has {
			if def > 0 {
				return def
			}
			ok = false
			return 0
		}
		n, isCount := countOf(v)
		if !isCount {
			ok = false
		}
		return n
	}
	pr.gpn, pr.nodes = cnt(hw, "gpus_per_node", 0), cnt(hw, "nodes", 0)
	pr.heads, pr.kvHeads = cnt(model, "attention_heads", 0), cnt(model, "kv_heads", 0)
	pr.hidden, pr.layers = cnt(model, "hidden_size", 0), cnt(model, "layers", 0)
	pr.vocab = float64(cnt(model, "vocab_size", 0))
	pr.params = float64(cnt(model, "parameters", 0))
	pr.ffn = float64(cnt(model, "ffn_hidden_size", 4*max(pr.hidden, 1)))
	pr.gbs, pr.seq = cnt(obj, "global_batch_size", 0), cnt(obj, "sequence_length", 0)
	pr.hasMoE = moe != nil
	if pr.hasMoE {
		pr.experts = cnt(moe, "experts", 0)
		pr.topK = 1
		if k, has := countOf(moe["top_k"]); has {
			pr.topK = k
		}
		if e, has := floatOf(moe["expert_parameters"]); has && e >= 0 {
			pr.expertParams = e
		}
		pr.active = float64(cnt(moe, "active_parameters", int(pr.params)))
		if k, has := countOf(moe["top_k"]); has && k > pr.experts {
			ok = false
		}
		if pr.expertParams >= pr.params || pr.active > pr.params {
			ok = false
		}
	} else {
		pr.active = pr.params
	}
	pr.dense = pr.params - pr.expertParams
	pr.mlpWidth = pr.ffn
	if pr.hasMoE {
		expertFFN, shared := pr.ffn, 0.0
		if f, has := floatOf(moe["expert_ffn_hidden_size"]); has {
			expertFFN = f
		}
		if f, has := floatOf(moe["shared_expert_ffn_hidden_size"]); has {
			shared = f
		}
		pr.mlpWidth = float64(pr.topK)*expertFFN + shared
	}
	if _, hasHeadDim := countOf(model["head_dim"]); !hasHeadDim && pr.heads > 0 && pr.hidden%pr.heads != 0 {
		ok = false // heads × head_dim must be the hidden size unless head_dim is declared
	}
	pr.engine = "other"
	if e, has := par["engine"].(string); has {
		pr.engine = e
	}
	pr.megatron = pr.engine == "megatron" || pr.engine == "nemo"
	prec, _ := par["precision"].(string)
	switch {
	case par["gradient_reduce_precision"] == "fp32":
		pr.gradBytes = 4
	case par["gradient_reduce_precision"] == "bf16":
		pr.gradBytes = 2
	case prec == "fp32", pr.megatron:
		pr.gradBytes = 4
	default:
		pr.gradBytes = 2
	}
	// Megatron's distributed optimizer (memory.rego _megatron_bytes)
	switch {
	case prec == "fp32":
		pr.megatronBytes = [2]float64{8, 8}
	case pr.gradBytes == 4:
		pr.megatronBytes = [2]float64{6, 12}
	default:
		pr.megatronBytes = [2]float64{4, 16}
	}
	if b, has := floatOf(par["bytes_per_param"]); has && b > 0 {
		pr.bytesOverride = b
	}
	split, _ := par["pipeline_split"].(map[string]any)
	pr.splitUnits = pr.layers
	if split["embedding_stage"] == true {
		pr.splitUnits++
		pr.embeddingUnit = 1
	}
	if split["loss_stage"] == true {
		pr.splitUnits++
		pr.lossUnit = 1
	}
	if sl, has := split["stage_layers"]; has && sl != nil {
		pr.hasStageLayers = true
		arr, _ := sl.([]any)
		for _, v := range arr {
			f, isNum := floatOf(v)
			if !isNum || f < 0 || f != float64(int(f)) {
				pr.stageLayers = nil
				break
			}
			pr.stageLayers = append(pr.stageLayers, int(f))
		}
	}
	for _, k := range []string{"first_stage_layers", "last_stage_layers"} {
		if n, has := countOf(split[k]); has {
			pr.declaredEnds++
			pr.declaredEndLayers += n
			if k == "first_stage_layers" {
				pr.splitFirst = n
			} else {
				pr.splitLast = n
			}
		}
	}
	if s, has := par["pipeline_schedule"].(string); has {
		switch s {
		case "1f1b", "interleaved", "zero_bubble", "dualpipe":
			pr.declaredSchedule = s
		default:
			ok = false
		}
	}
	pr.noSequenceParallel = par["sequence_parallel"] == false
	gpuType, _ := hw["gpu_type"].(string)
	pr.gpu, pr.hasGPU = p.gpus[gpuType]
	fabric, _ := hw["fabric"].(string)
	var f fabricRow
	f, pr.hasFabric = p.fabrics[fabric]
	pr.fabricGBps = f.gbpsPerGPU
	zero := p.cfg.defaultZero
	if z, has := par["zero_stage"]; has {
		n, isNum := floatOf(z)
		if !isNum || (n != 0 && n != 1 && n != 2 && n != 3) {
			ok = false
		}
		zero = int(n)
	}
	ckpt := "none"
	if c, has := par["activation_checkpointing"]; has {
		s, _ := c.(string)
		if s != "none" && s != "selective" && s != "full" {
			ok = false
		}
		ckpt = s
	}
	pr.layout = Layout{
		Nodes: pr.nodes, TP: cnt(par, "tensor", 0), PP: cnt(par, "pipeline", 0), CP: cnt(par, "context", 1),
		EP: cnt(par, "expert", 1), ETP: cnt(par, "expert_tensor", 1), V: cnt(par, "virtual_stages", 1),
		MBS: cnt(obj, "micro_batch_size", 0), Zero: zero, Checkpointing: ckpt, Precision: prec,
	}
	if prec == "" {
		ok = false
	}
	if pr.declaredSchedule != "" {
		pr.layout.Schedule = pr.declaredSchedule
	} else {
		pr.layout.Schedule = pr.scheduleAt(pr.layout.V)
	}
	pr.ok = ok && pr.hasGPU && pr.hasFabric
	return pr
}

// scheduleAt is _schedule_at(v).
func (pr *problem) scheduleAt(v int) string {
	switch {
	case v > 1:
		return "interleaved"
	case pr.declaredSchedule != "" && pr.declaredSchedule != "interleaved":
		return pr.declaredSchedule
	}
	return "1f1b"
}

func (pr *problem) supports(precision string) bool {
	for _, q := range pr.gpu.precisions {
		if q == precision {
			return true
		}
	}
	return false
}

// layerSplitEven is _is_layer_split_even(pp, v).
func (pr *problem) layerSplitEven(pp, v int) bool {
	if (pr.splitFirst > 0 && pr.splitFirst%v != 0) || (pr.splitLast > 0 && pr.splitLast%v != 0) {
		return false // a declared end stage must be whole chunks
	}
	stages := pp - pr.declaredEnds
	rest := pr.splitUnits - pr.declaredEndLayers
	if stages > 0 && rest > 0 && rest%(stages*v) == 0 {
		return true
	}
	return pp == pr.declaredEnds && pr.splitUnits == pr.declaredEndLayers && v == 1
}

// structural are the integer hard rules of a layout (rules.rego), those a
// layout fails before any figure is computed.
func (p *Planner) structural(pr *problem, l Layout) bool {
	c := &p.cfg
	switch {
	case l.TP > pr.gpu.domain, pr.heads%l.TP != 0, pr.kvHeads%l.TP != 0 && l.TP%pr.kvHeads != 0:
		return false
	case l.CP > 1 && pr.seq%(2*l.CP) != 0:
		return false
	case (l.Nodes*pr.gpn)%(l.TP*l.PP*l.CP) != 0:
		return false
	case l.PP*l.V > pr.layers+c.extraStages:
		return false
	case !pr.hasStageLayers && pr.megatron && l.PP > 1 && !pr.layerSplitEven(l.PP, l.V):
		return false
	case pr.hasStageLayers && !pr.stageLayoutOK(l.PP):
		return false
	case l.Schedule == "interleaved" && l.V == 1 && l.PP > 1, l.V > 1 && l.Schedule != "interleaved":
		return false
	case pr.engine == "deepspeed" && l.Zero >= 2 && l.PP > 1:
		return false
	}
	if l.EP*l.ETP > 1 && !pr.hasMoE {
		return false
	}
	if pr.hasMoE && pr.experts%l.EP != 0 {
		return false
	}
	dp := l.Nodes * pr.gpn / (l.TP * l.PP * l.CP)
	if l.EP*l.ETP > 1 && (dp*l.CP*l.TP)%(l.EP*l.ETP) != 0 {
		return false
	}
	unit := l.MBS * dp
	if pr.gbs%unit != 0 || pr.gbs < unit {
		return false
	}
	if l.PP > 1 && pr.gbs/unit < l.PP {
		return false
	}
	switch l.Precision {
	case "fp8", "mxfp8", "nvfp4", "bf16":
		if !pr.supports(l.Precision) {
			return false
		}
	}
	return true
}

// figures computes a structurally valid layout's estimates
// (layout.rego, memory.rego, communication.rego).
func (p *Planner) figures(pr *problem, l Layout) Figures {
	c := &p.cfg
	var f Figures
	f.World = l.Nodes * pr.gpn
	f.DP = f.World / (l.TP * l.PP * l.CP)
	f.Microbatches = pr.gbs / (l.MBS * f.DP)
	f.TokensPerGPU = float64(pr.gbs) * float64(pr.seq) / float64(f.World)
	tp, pp, cp, ep, etp, v := float64(l.TP), float64(l.PP), float64(l.CP), float64(l.EP), float64(l.ETP), float64(l.V)
	dp, m, mbs := float64(f.DP), float64(f.Microbatches), float64(l.MBS)

	// model states
	stage := l.Zero
	if l.PP > 1 && stage == 3 {
		stage = 1
	}
	bytes := func(n float64) float64 {
		if pr.bytesOverride > 0 {
			return pr.bytesOverride
		}
		switch {
		case stage == 0 && pr.megatron:
			return pr.megatronBytes[0] + pr.megatronBytes[1]
		case stage == 0:
			return 16
		case stage == 1 && pr.megatron:
			return pr.megatronBytes[0] + pr.megatronBytes[1]/n
		case stage == 1:
			return 4 + 12/n
		case stage == 2:
			return 2 + 14/n
		}
		return 16 / n
	}
	edp := math.Max(1, dp*cp*tp/(ep*etp))
	denseLocal := pr.dense / (tp * pp)
	expertLocal := pr.expertParams / (ep * etp * pp)
	states := (denseLocal*bytes(dp*cp) + expertLocal*bytes(edp)) / 1e9
	if l.Schedule == "dualpipe" {
		states *= 2
	}
	f.StatesGB = states

	// activations
	s := float64(pr.seq)
	h := float64(pr.hidden)
	unsharded := 0.0
	if pr.noSequenceParallel {
		unsharded = 1 - 1/tp
	}
	tokens := s / cp * mbs * h
	layerAct := tokens * ((18+4*pr.mlpWidth/h)/tp + 10*unsharded)
	kept := 2 * (s / cp) * mbs * (h * (1/tp + unsharded))
	stageBytes := func(layers, inFlight float64) float64 {
		if l.Checkpointing == "full" {
			return layers*kept*inFlight + layerAct
		}
		return layers * layerAct * inFlight
	}
	logits := 4 * (s / cp) * mbs * pr.vocab / tp
	var act float64
	if l.PP == 1 {
		act = stageBytes(float64(pr.layers), 1) + logits
	} else {
		var inFlight float64
		switch l.Schedule {
		case "interleaved":
			inFlight = math.Min(pp, m) * (1 + (pp-1)/(pp*v))
		case "dualpipe":
			inFlight = math.Min(pp+1, m)
		default:
			inFlight = math.Min(pp, m)
		}
		even := math.Ceil(float64(pr.splitUnits) / pp)
		first, last := math.Max(0, even-float64(pr.embeddingUnit)), math.Max(0, even-float64(pr.lossUnit))
		if len(pr.stageLayers) == l.PP {
			first, last = float64(pr.stageLayers[0]), float64(pr.stageLayers[l.PP-1])
		}
		if pr.splitFirst > 0 {
			first = float64(pr.splitFirst)
		}
		if pr.splitLast > 0 {
			last = float64(pr.splitLast)
		}
		act = math.Max(stageBytes(first, inFlight), stageBytes(last, 1)+logits)
	}
	f.MemoryGB = states + act/1e9 + c.overheadGB

	// bubble
	switch l.Schedule {
	case "zero_bubble":
		idle := (pp - 1) / 3
		f.Bubble = idle / (m + idle)
	case "dualpipe":
		idle := math.Max(0, pp/2-1)
		f.Bubble = idle / (m + idle)
	default:
		f.Bubble = (pp - 1) / (v*m + pp - 1)
	}

	// data-parallel communication against compute
	zeroFactor := 1.0
	if stage == 3 {
		zeroFactor = c.zero3Factor
	}
	volume := 2 * (dp - 1) / dp * ((denseLocal + expertLocal) * pr.gradBytes) * zeroFactor
	perNode := math.Min(dp, math.Max(1, math.Floor(float64(pr.gpn)/(tp*cp))))
	if dp > perNode {
		f.CommSeconds = volume / perNode / (c.efficiency * pr.fabricGBps * 1e9)
	} else {
		f.CommSeconds = volume / (c.efficiency * pr.gpu.intraGBps * 1e9)
	}
	factor := 6.0
	if l.Checkpointing == "full" {
		factor = 8
	}
	f.ComputeSeconds = factor * pr.active * f.TokensPerGPU / (c.mfu * pr.gpu.peakTFLOPS * 1e12)
	f.CommRatio = f.CommSeconds / f.ComputeSeconds

	speedup := 1.0
	if sp, ok := p.plan.precisionSpeedup[l.Precision]; ok {
		speedup = sp
	}
	compute := f.ComputeSeconds / speedup
	f.ModelParallelCommSeconds = p.modelParallelComm(pr, l, f)
	f.PipelinedComputeSeconds = compute / (1 - f.Bubble)
	f.ExposedCommSeconds = p.plan.exposedComm * (f.CommSeconds + f.ModelParallelCommSeconds)
	f.StepSeconds = f.PipelinedComputeSeconds + f.ExposedCommSeconds
	if f.Bubble > c.bubbleWarn {
		f.Warnings++
	}
	if f.MemoryGB > c.memoryWarnFraction*pr.gpu.memoryGB {
		f.Warnings++
	}
	if f.CommRatio > c.commWarn {
		f.Warnings++
	}
	return f
}

// passes reports whether a structurally valid layout's figures pass every
// hard rule and fit memory with the margin a declared layout needs (no
// MEMORY_ESTIMATE_EXCEEDS_GPU, deny or warn).
func (p *Planner) passes(pr *problem, l Layout, f Figures) bool {
	c := &p.cfg
	return f.TokensPerGPU >= c.tokensDeny &&
		f.Bubble <= c.bubbleDeny &&
		f.StatesGB <= c.statesFraction*pr.gpu.memoryGB-c.overheadGB &&
		f.MemoryGB <= c.memoryWarnFraction*pr.gpu.memoryGB &&
		f.CommRatio <= c.commDeny
}

// countOf is a positive whole number (the gate's _count guard).
func countOf(v any) (int, bool) {
	f, ok := floatOf(v)
	if !ok || f < 1 || f != math.Floor(f) || f > 1<<53 {
		return 0, false
	}
	return int(f), true
}

// floatOf is a JSON number as float64.
func floatOf(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		return f, err == nil
	case float64:
		return x, true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	}
	return 0, false
}

// modelParallelComm is the traffic of one step that the gate does not
// price but a planner must, or it would spread every model over as many
// ranks as memory allows: in bf16 activations (2 bytes) per microbatch,
// tensor parallel's 4 all-reduces per layer of 2(tp-1)/tp of the layer's
// activations (Megatron-LM: 2 forward, 2 backward; Korthikanti et al.
// 2022), pipeline parallel's send and receive of one microbatch's
// activations per stage boundary, context parallel's ring exchange of K
// and V (cp-1 steps forward, twice backward), and expert parallel's
// dispatch and combine all-to-alls of top_k copies of each token, forward
// and backward. Inside the NVLink domain at the GPU's intra-node
// bandwidth, across it at the fabric's, both at bandwidth_efficiency.
func (p *Planner) modelParallelComm(pr *problem, l Layout, f Figures) float64 {
	c := &p.cfg
	intra := c.efficiency * pr.gpu.intraGBps * 1e9
	inter := c.efficiency * pr.fabricGBps * 1e9
	tp, pp, cp, ep := float64(l.TP), float64(l.PP), float64(l.CP), float64(l.EP)
	m := float64(f.Microbatches)
	layersPerStage := float64(pr.layers) / pp
	act := float64(pr.seq) / cp * float64(l.MBS) * float64(pr.hidden) * 2 // one layer's activations, bytes
	var seconds float64
	if l.TP > 1 {
		seconds += m * layersPerStage * 4 * (2 * (tp - 1) / tp * act / tp) / intra
	}
	if l.PP > 1 {
		bw := inter
		if l.TP*l.CP < pr.gpu.domain && l.TP*l.CP*l.PP <= pr.gpu.domain {
			bw = intra
		}
		seconds += m * 2 * act / tp / bw
	}
	if l.CP > 1 {
		bw := intra
		if l.TP*l.CP > pr.gpu.domain {
			bw = inter
		}
		kv := act * float64(pr.kvHeads) / float64(pr.heads) / tp
		seconds += m * layersPerStage * 3 * (cp - 1) * 2 * kv / bw
	}
	if l.EP > 1 && pr.hasMoE {
		bw := intra
		if l.EP*l.TP > pr.gpu.domain {
			bw = inter
		}
		topK := float64(pr.topK)
		seconds += m * layersPerStage * 4 * topK * act / tp * (ep - 1) / ep / bw
	}
	return seconds
}

// stageLayoutOK is _is_stage_layout_ok(pp): one entry per stage, every
// layer placed.
func (pr *problem) stageLayoutOK(pp int) bool {
	if len(pr.stageLayers) != pp {
		return false
	}
	sum := 0
	for _, n := range pr.stageLayers {
		sum += n
	}
	return sum == pr.layers
}
