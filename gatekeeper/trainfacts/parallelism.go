package trainfacts

import (
	"github.com/itocompute/itogate/internal/regonum"
)

// The parallelism model: policies/ito/parallelism (parallelism.rego for
// the manifest's layout, layout.rego, memory.rego, communication.rego and
// rules.rego for the formulas). Each function below is the Rego function of
// the same name, in the same order of operations.

type parallelismConfig struct {
	overheadGB, defaultZero, efficiency, mfu, zero3Factor, overprovision regonum.Num
}

type gpuRow struct {
	memoryGB, peakTFLOPS, intraGBps regonum.Num
}

type fabricRow struct {
	gbpsPerGPU regonum.Num
}

func (m *Model) readParallelism(r *reader, cfg, gpus, fabrics map[string]any) {
	if r.err != nil {
		return
	}
	m.par = parallelismConfig{
		overheadGB:    r.num(cfg, "memory_overhead_gb"),
		defaultZero:   r.num(cfg, "default_zero_stage"),
		efficiency:    r.num(cfg, "bandwidth_efficiency"),
		mfu:           r.num(cfg, "model_flops_utilization"),
		zero3Factor:   r.num(cfg, "zero3_comm_factor"),
		overprovision: r.num(cfg, "overprovision_factor"),
	}
	m.gpus = readRows(r, "gpus", gpus, func(row map[string]any) gpuRow {
		return gpuRow{
			memoryGB:   r.num(row, "memory_gb"),
			peakTFLOPS: r.num(row, "peak_tflops_16bit"),
			intraGBps:  r.num(row, "intra_node_gbytes_per_s"),
		}
	})
	m.fabrics = readRows(r, "fabrics", fabrics, func(row map[string]any) fabricRow {
		return fabricRow{gbpsPerGPU: r.num(row, "gbytes_per_s_per_gpu")}
	})
}

// layout is the manifest's layout (parallelism._manifest_layout).
type layout struct {
	nodes, tp, pp, cp, ep, etp, v, mbs, zero regonum.Num
	schedule, checkpointing                  string
	precision                                any
}

// parallelismFacts are input.facts.parallelism.
type parallelismFacts struct {
	hasLayout bool
	l         layout
	world     regonum.Num
	dp, unit, microbatches, tokens, bytesPerParam, expertBytesPerParam, edp,
	paramsPerGPU, denseLocal, expertLocal, states, activations, memory, bubble,
	commSeconds, computeSeconds, commRatio, imbalance, overprovisionStates regonum.Num
}

func (f parallelismFacts) facts() map[string]any {
	out := map[string]any{}
	if f.hasLayout {
		l := f.l
		out["layout"] = map[string]any{
			"nodes": l.nodes.JSON(), "tp": l.tp.JSON(), "pp": l.pp.JSON(), "cp": l.cp.JSON(), "ep": l.ep.JSON(),
			"etp": l.etp.JSON(), "v": l.v.JSON(), "schedule": l.schedule, "mbs": l.mbs.JSON(),
			"zero_stage": l.zero.JSON(), "checkpointing": l.checkpointing, "precision": l.precision,
		}
	}
	put(out, "world_size", f.world)
	put(out, "dp", f.dp)
	put(out, "batch_unit", f.unit)
	put(out, "microbatches", f.microbatches)
	put(out, "tokens_per_gpu", f.tokens)
	put(out, "bytes_per_param", f.bytesPerParam)
	put(out, "expert_bytes_per_param", f.expertBytesPerParam)
	put(out, "expert_data_parallel", f.edp)
	put(out, "params_per_gpu", f.paramsPerGPU)
	put(out, "dense_params_per_gpu", f.denseLocal)
	put(out, "expert_params_per_gpu", f.expertLocal)
	put(out, "model_states_gb", f.states)
	put(out, "activations_gb", f.activations)
	put(out, "memory_gb", f.memory)
	put(out, "bubble", f.bubble)
	put(out, "comm_seconds", f.commSeconds)
	put(out, "compute_seconds", f.computeSeconds)
	put(out, "comm_ratio", f.commRatio)
	put(out, "stage_imbalance", f.imbalance)
	put(out, "overprovision_states_gb", f.overprovisionStates)
	// the figures the decision's estimates show, rounded (lib.round2)
	var c regonum.Calc
	rounded := map[string]any{}
	put(rounded, "bytes_per_param", round2(&c, f.bytesPerParam))
	put(rounded, "expert_bytes_per_param", round2(&c, f.expertBytesPerParam))
	put(rounded, "model_states_gb", round2(&c, f.states))
	put(rounded, "activations_gb", round2(&c, f.activations))
	put(rounded, "memory_gb", round2(&c, f.memory))
	put(rounded, "bubble", round2(&c, f.bubble))
	put(rounded, "comm_ratio", round2(&c, f.commRatio))
	out["rounded"] = rounded
	return out
}

var hundred = regonum.Int(100)

// round2 is lib.round2(x): round(x × 100) / 100.
func round2(c *regonum.Calc, x regonum.Num) regonum.Num {
	return c.Div(regonum.Round(c.Mul(x, hundred)), hundred)
}

// pmodel is the manifest's model and booking as the parallelism package
// reads them (parallelism.rego), for one decision. Its scalars are read on
// first use, in the order the reference first evaluates them: OPA memoizes
// a function call by its arguments' values, so _count(x) of a number equal
// to an earlier argument returns that argument's text (1.0 for a later 1),
// and count keeps that memo.
type pmodel struct {
	m      *Model
	c      *regonum.Calc
	model  map[string]any
	hasMod bool
	obj    map[string]any
	hw     map[string]any
	par    map[string]any
	hasPar bool
	moe    map[string]any
	hasMoe bool

	gpu    gpuRow
	hasGPU bool
	fabric fabricRow
	hasFab bool

	memo []regonum.Num // _count's results so far

	gpnL, nodesL, hiddenL, layersL, vocabL, paramsL, ffnL, gbsL, seqL, activeL lazy

	isMegatron, precisionFP32 bool

	expertParams, denseParams, gradBytes, bytesOverride regonum.Num
	split                                               map[string]any
	declaredSchedule                                    string
	hasDeclaredSchedule                                 bool
}

// lazy is a scalar computed on first use.
type lazy struct {
	v    regonum.Num
	done bool
}

func (l *lazy) get(f func() regonum.Num) regonum.Num {
	if !l.done {
		l.v, l.done = f(), true
	}
	return l.v
}

// count is parallelism._count, memoized as OPA memoizes it.
func (p *pmodel) count(v any, ok bool) regonum.Num {
	if !ok {
		return regonum.Num{}
	}
	n := count(v, true)
	if !n.Defined() {
		return n
	}
	for _, prev := range p.memo {
		if regonum.Equal(prev, n) {
			return prev
		}
	}
	p.memo = append(p.memo, n)
	return n
}

func (p *pmodel) gpn() regonum.Num {
	return p.gpnL.get(func() regonum.Num { return p.count(at(p.hw, "gpus_per_node")) })
}

func (p *pmodel) nodes() regonum.Num {
	return p.nodesL.get(func() regonum.Num { return p.count(at(p.hw, "nodes")) })
}

func (p *pmodel) hidden() regonum.Num {
	return p.hiddenL.get(func() regonum.Num { return p.count(at(p.model, "hidden_size")) })
}

func (p *pmodel) layers() regonum.Num {
	return p.layersL.get(func() regonum.Num { return p.count(at(p.model, "layers")) })
}

func (p *pmodel) vocab() regonum.Num {
	return p.vocabL.get(func() regonum.Num { return p.count(at(p.model, "vocab_size")) })
}

func (p *pmodel) params() regonum.Num {
	return p.paramsL.get(func() regonum.Num { return p.count(at(p.model, "parameters")) })
}

func (p *pmodel) gbs() regonum.Num {
	return p.gbsL.get(func() regonum.Num { return p.count(at(p.obj, "global_batch_size")) })
}

func (p *pmodel) seq() regonum.Num {
	return p.seqL.get(func() regonum.Num { return p.count(at(p.obj, "sequence_length")) })
}

// ffn is _count(object.get(_model, "ffn_hidden_size", 4 * _hidden)).
func (p *pmodel) ffn() regonum.Num {
	return p.ffnL.get(func() regonum.Num {
		h := p.hidden()
		if !h.Defined() {
			return regonum.Num{}
		}
		return p.count(get(p.model, p.hasMod, "ffn_hidden_size", p.c.Mul(four, h).JSON()))
	})
}

// activeParams is _count(object.get(_moe, "active_parameters", _params)).
func (p *pmodel) activeParams() regonum.Num {
	return p.activeL.get(func() regonum.Num {
		params := p.params()
		if !params.Defined() {
			return regonum.Num{}
		}
		return p.count(get(p.moe, p.hasMoe, "active_parameters", params.JSON()))
	})
}

var (
	zero     = regonum.Int(0)
	two      = regonum.Int(2)
	three    = regonum.Int(3)
	four     = regonum.Int(4)
	six      = regonum.Int(6)
	eight    = regonum.Int(8)
	ten      = regonum.Int(10)
	twelve   = regonum.Int(12)
	fourteen = regonum.Int(14)
	sixteen  = regonum.Int(16)
	eighteen = regonum.Int(18)
	e9       = regonum.Const("1e9")
	e12      = regonum.Const("1e12")
)

func (m *Model) parallelism(c *regonum.Calc, in input) parallelismFacts {
	p := &pmodel{m: m, c: c}
	mf := in.manifest
	hw, hasHW := objAt(mf, "hardware")
	p.par, p.hasPar = objAt(mf, "parallelism")
	p.model, p.hasMod = objAt(mf, "model")
	p.obj, _ = objAt(mf, "objective")
	p.hw = hw
	if name, ok := str(at(hw, "gpu_type")); ok && hasHW {
		p.gpu, p.hasGPU = m.gpus[name]
	}
	if name, ok := str(at(hw, "fabric")); ok && hasHW {
		p.fabric, p.hasFab = m.fabrics[name]
	}
	if moe, ok := get(p.model, p.hasMod, "moe", map[string]any{}); ok {
		p.moe, p.hasMoe = moe.(map[string]any)
	}
	if ep, ok := get(p.moe, p.hasMoe, "expert_parameters", zero.JSON()); ok {
		if n := num(ep, true); regonum.GreaterEq(n, zero) {
			p.expertParams = n
		}
	}

	engine, _ := get(p.par, p.hasPar, "engine", "other")
	isMegatron := engine == "megatron" || engine == "nemo"
	p.isMegatron = isMegatron
	grp, hasGRP := at(p.par, "gradient_reduce_precision")
	prec, hasPrec := at(p.par, "precision")
	p.precisionFP32 = hasPrec && prec == "fp32"
	switch {
	case hasGRP && grp == "fp32":
		p.gradBytes = four
	case hasGRP && grp == "bf16":
		p.gradBytes = two
	case hasPrec && prec == "fp32":
		p.gradBytes = four
	case isMegatron:
		p.gradBytes = four
	default:
		p.gradBytes = two
	}
	if b := num(at(p.par, "bytes_per_param")); regonum.Greater(b, zero) {
		p.bytesOverride = b
	}
	if s, ok := objAt(p.par, "pipeline_split"); ok {
		p.split = s
	} else {
		p.split = map[string]any{}
	}
	if s, ok := str(at(p.par, "pipeline_schedule")); ok && isSchedule(s) {
		p.declaredSchedule, p.hasDeclaredSchedule = s, true
	}

	// in the reference's order (facts.rego): the layout, then each figure
	var f parallelismFacts
	l, ok := p.manifestLayout(prec, hasPrec)
	f.world = c.Mul(p.nodes(), p.gpn())
	if !ok {
		return f
	}
	f.hasLayout, f.l = true, l
	f.dp = p.dpAt(l.nodes, l.tp, l.pp, l.cp)
	f.unit = c.Mul(l.mbs, f.dp)
	f.microbatches = p.microbatchesAt(c.Mul(l.mbs, f.dp))
	f.tokens = c.Div(c.Mul(p.gbs(), p.seq()), p.world(l))
	f.bytesPerParam = p.bytesAt(l.zero, l.pp, c.Mul(f.dp, l.cp))
	f.expertBytesPerParam = p.bytesAt(l.zero, l.pp, p.edpAt(f.dp, l.tp, l.cp, l.ep, l.etp))
	f.edp = p.edpAt(f.dp, l.tp, l.cp, l.ep, l.etp)
	f.paramsPerGPU = p.paramsLocal(l.tp, l.pp, l.ep, l.etp)
	f.denseLocal = p.denseLocal(l.tp, l.pp)
	f.expertLocal = p.expertLocal(l.pp, l.ep, l.etp)
	f.states = c.Mul(p.statesGBAt(f.dp, l.tp, l.pp, l.cp, l.ep, l.etp, l.zero), statesFactor(l.schedule))
	f.activations = p.activationsOf(l.schedule, l.tp, l.pp, l.cp, l.v, l.mbs, f.microbatches, l.checkpointing)
	if f.states.Defined() && f.activations.Defined() {
		f.memory = c.Add(c.Add(f.states, f.activations), m.par.overheadGB)
	}
	f.bubble = p.bubbleOf(l.schedule, l.pp, l.v, f.microbatches)
	f.commSeconds = p.commSecondsAt(f.dp, l.tp, l.pp, l.cp, l.ep, l.etp, l.zero)
	f.computeSeconds = p.computeSecondsAt(l.checkpointing, p.world(l))
	if f.dp.Defined() && p.world(l).Defined() {
		f.commRatio = c.Div(f.commSeconds, f.computeSeconds)
	}
	layers := p.layers()
	f.imbalance = c.Div(regonum.Ceil(c.Div(layers, c.Mul(l.pp, l.v))), c.Div(layers, c.Mul(l.pp, l.v)))
	f.overprovisionStates = c.Mul(
		p.statesGBAt(c.Div(f.dp, m.par.overprovision), l.tp, l.pp, l.cp, l.ep, l.etp, l.zero),
		statesFactor(l.schedule))
	return f
}

func isSchedule(s string) bool {
	return s == "1f1b" || s == "interleaved" || s == "zero_bubble" || s == "dualpipe"
}

// manifestLayout is parallelism._manifest_layout. OPA evaluates an object
// literal's values in the order of its sorted keys, and stops at the first
// undefined one: the order decides which text count's memo hands out.
func (p *pmodel) manifestLayout(prec any, hasPrec bool) (layout, bool) {
	var l layout
	ck, _ := get(p.par, p.hasPar, "activation_checkpointing", "none")
	switch s, _ := ck.(string); s {
	case "none", "selective", "full":
		l.checkpointing = s
	default:
		return layout{}, false
	}
	for _, field := range []struct {
		n *regonum.Num
		f func() regonum.Num
	}{
		{&l.cp, func() regonum.Num { return p.optionalCount("context") }},
		{&l.ep, func() regonum.Num { return p.optionalCount("expert") }},
		{&l.etp, func() regonum.Num { return p.optionalCount("expert_tensor") }},
		{&l.mbs, func() regonum.Num { return p.count(at(p.obj, "micro_batch_size")) }},
		{&l.nodes, p.nodes},
		{&l.pp, func() regonum.Num { return p.count(at(p.par, "pipeline")) }},
	} {
		if *field.n = field.f(); !field.n.Defined() {
			return layout{}, false
		}
	}
	if !hasPrec {
		return layout{}, false
	}
	l.precision = prec
	schedule, ok := p.manifestSchedule()
	if !ok {
		return layout{}, false
	}
	l.schedule = schedule
	if l.tp = p.count(at(p.par, "tensor")); !l.tp.Defined() {
		return layout{}, false
	}
	if l.v = p.optionalCount("virtual_stages"); !l.v.Defined() {
		return layout{}, false
	}
	// _zero_stage: object.get(_par, "zero_stage", default) in {0, 1, 2, 3}
	zs, _ := get(p.par, true, "zero_stage", p.m.par.defaultZero.JSON())
	z := num(zs, true)
	if !regonum.Equal(z, zero) && !regonum.Equal(z, one) && !regonum.Equal(z, two) && !regonum.Equal(z, three) {
		return layout{}, false
	}
	l.zero = z
	return l, true
}

// optionalCount is _optional_count(_par, key).
func (p *pmodel) optionalCount(key string) regonum.Num {
	return p.count(get(p.par, p.hasPar, key, one.JSON()))
}

// manifestSchedule is _manifest_schedule.
func (p *pmodel) manifestSchedule() (string, bool) {
	if truthy(at(p.par, "pipeline_schedule")) {
		if p.hasDeclaredSchedule {
			return p.declaredSchedule, true
		}
		return "", false // else-branch: `not _par.pipeline_schedule` fails
	}
	v := p.optionalCount("virtual_stages")
	if !v.Defined() {
		return "", false
	}
	return p.scheduleAt(v), true
}

// scheduleAt is _schedule_at(v).
func (p *pmodel) scheduleAt(v regonum.Num) string {
	if regonum.Greater(v, one) {
		return "interleaved"
	}
	if p.hasDeclaredSchedule && p.declaredSchedule != "interleaved" {
		return p.declaredSchedule
	}
	return "1f1b"
}

func (p *pmodel) world(l layout) regonum.Num { return p.c.Mul(l.nodes, p.gpn()) }

// dpAt is _dp_at: W / (tp·pp·cp) when it divides.
func (p *pmodel) dpAt(nodes, tp, pp, cp regonum.Num) regonum.Num {
	c := p.c
	world := c.Mul(nodes, p.gpn())
	group := c.Mul(c.Mul(tp, pp), cp)
	if !regonum.Equal(c.Rem(world, group), zero) {
		return regonum.Num{}
	}
	return c.Div(world, group)
}

// microbatchesAt is _microbatches_at(unit): gbs / unit when it divides.
func (p *pmodel) microbatchesAt(unit regonum.Num) regonum.Num {
	c := p.c
	gbs := p.gbs()
	if !regonum.Equal(c.Rem(gbs, unit), zero) || !regonum.GreaterEq(gbs, unit) {
		return regonum.Num{}
	}
	return c.Div(gbs, unit)
}

func statesFactor(schedule string) regonum.Num {
	if schedule == "dualpipe" {
		return two
	}
	return one
}

// effectiveStage is _effective_stage(zero, pp).
func effectiveStage(z, pp regonum.Num) regonum.Num {
	if regonum.Greater(pp, one) && regonum.Equal(z, three) {
		return one
	}
	return z
}

// stageBytes is _stage_bytes(stage, n).
func (p *pmodel) stageBytes(stage, n regonum.Num) regonum.Num {
	c := p.c
	switch {
	case regonum.Equal(stage, zero) && p.isMegatron:
		kept, sharded := p.megatronBytes()
		return c.Add(kept, sharded)
	case regonum.Equal(stage, zero):
		return sixteen
	case regonum.Equal(stage, one) && p.isMegatron:
		if !n.Defined() {
			return regonum.Num{}
		}
		kept, sharded := p.megatronBytes()
		return c.Add(kept, c.Div(sharded, n))
	case regonum.Equal(stage, one):
		if !n.Defined() {
			return regonum.Num{}
		}
		return c.Add(four, c.Div(twelve, n))
	case regonum.Equal(stage, two):
		if !n.Defined() {
			return regonum.Num{}
		}
		return c.Add(two, c.Div(fourteen, n))
	case regonum.Equal(stage, three):
		return c.Div(sixteen, n)
	}
	return regonum.Num{}
}

// megatronBytes is _megatron_bytes: the bytes per parameter every
// data-parallel rank keeps and those Megatron's distributed optimizer shards
// (Megatron Core's distributed-optimizer guide).
func (p *pmodel) megatronBytes() (kept, sharded regonum.Num) {
	switch {
	case p.precisionFP32:
		return eight, eight
	case regonum.Equal(p.gradBytes, four):
		return six, twelve
	}
	return four, sixteen
}

// bytesAt is _bytes_at(zero, pp, n): the override, else the stage's bytes.
// (The function's arguments must all be defined, as in any Rego call.)
func (p *pmodel) bytesAt(z, pp, n regonum.Num) regonum.Num {
	if !z.Defined() || !pp.Defined() || !n.Defined() {
		return regonum.Num{}
	}
	if p.bytesOverride.Defined() {
		return p.bytesOverride
	}
	return p.stageBytes(effectiveStage(z, pp), n)
}

// edpAt is _edp_at: max([1, dp·cp·tp / (ep·etp)]).
func (p *pmodel) edpAt(dp, tp, cp, ep, etp regonum.Num) regonum.Num {
	c := p.c
	return regonum.Max(one, c.Div(c.Mul(c.Mul(dp, cp), tp), c.Mul(ep, etp)))
}

func (p *pmodel) denseLocal(tp, pp regonum.Num) regonum.Num {
	return p.c.Div(p.denseParamsV(), p.c.Mul(tp, pp))
}

// denseParamsV is _dense_params: _params − _expert_params.
func (p *pmodel) denseParamsV() regonum.Num { return p.c.Sub(p.params(), p.expertParams) }

func (p *pmodel) expertLocal(pp, ep, etp regonum.Num) regonum.Num {
	return p.c.Div(p.expertParams, p.c.Mul(p.c.Mul(ep, etp), pp))
}

func (p *pmodel) paramsLocal(tp, pp, ep, etp regonum.Num) regonum.Num {
	return p.c.Add(p.denseLocal(tp, pp), p.expertLocal(pp, ep, etp))
}

// statesGBAt is _states_gb_at: dense states over dp·cp plus expert states
// over edp, in GB.
func (p *pmodel) statesGBAt(dp, tp, pp, cp, ep, etp, z regonum.Num) regonum.Num {
	c := p.c
	for _, n := range []regonum.Num{dp, tp, pp, cp, ep, etp, z} {
		if !n.Defined() {
			return regonum.Num{}
		}
	}
	dense := c.Mul(p.denseLocal(tp, pp), p.bytesAt(z, pp, c.Mul(dp, cp)))
	var expert regonum.Num
	switch {
	case regonum.Equal(p.expertParams, zero):
		expert = zero
	case regonum.Greater(p.expertParams, zero):
		expert = c.Mul(p.expertLocal(pp, ep, etp), p.bytesAt(z, pp, p.edpAt(dp, tp, cp, ep, etp)))
	}
	return c.Div(c.Add(dense, expert), e9)
}

// activationsOf is _activations_of: the peak stage's activations in GB.
func (p *pmodel) activationsOf(schedule string, tp, pp, cp, v, mbs, m regonum.Num, ckpt string) regonum.Num {
	c := p.c
	for _, n := range []regonum.Num{tp, pp, cp, v, mbs, m} {
		if !n.Defined() {
			return regonum.Num{}
		}
	}
	if regonum.Equal(pp, one) {
		bytes := c.Add(p.stageActivationBytes(tp, p.layers(), cp, mbs, one, ckpt), p.logits(tp, cp, mbs))
		return c.Div(bytes, e9)
	}
	if !regonum.Greater(pp, one) {
		return regonum.Num{}
	}
	inFlight := p.inFlight(schedule, pp, v, m)
	first := p.stageActivationBytes(tp, p.endStageLayers("first_stage_layers", pp), cp, mbs, inFlight, ckpt)
	last := c.Add(p.stageActivationBytes(tp, p.endStageLayers("last_stage_layers", pp), cp, mbs, one, ckpt),
		p.logits(tp, cp, mbs))
	return c.Div(regonum.Max(first, last), e9)
}

// endStageLayers is _end_stage_layers(key, pp): the declared count, the
// stage's entry of a declared stage_layers, else the stage's share of the
// split units less the embedding (first) or the loss (last) unit.
func (p *pmodel) endStageLayers(key string, pp regonum.Num) regonum.Num {
	c := p.c
	if n := p.count(at(p.split, key)); n.Defined() && regonum.Greater(pp, zero) {
		return n
	}
	if layout, ok := p.stageLayers(); ok && regonum.Equal(regonum.Int(int64(len(layout))), pp) {
		if key == "first_stage_layers" {
			return layout[0]
		}
		return layout[len(layout)-1]
	}
	unit := "loss_stage"
	if key == "first_stage_layers" {
		unit = "embedding_stage"
	}
	return regonum.Max(zero, c.Sub(regonum.Ceil(c.Div(p.splitUnits(), pp)), p.flag(unit)))
}

// stageLayers is _stage_layers: pipeline_split.stage_layers when it is an
// array of whole numbers from 0.
func (p *pmodel) stageLayers() ([]regonum.Num, bool) {
	raw, ok := p.split["stage_layers"].([]any)
	if !ok {
		return nil, false
	}
	out := make([]regonum.Num, len(raw))
	for i, v := range raw {
		n := num(v, true)
		if !regonum.GreaterEq(n, zero) || !regonum.Equal(n, regonum.Floor(n)) {
			return nil, false
		}
		out[i] = n
	}
	return out, true
}

// flag is _flag(object.get(_split, key, false)): 1 when true, else 0.
func (p *pmodel) flag(key string) regonum.Num {
	if b, ok := p.split[key].(bool); ok && b {
		return one
	}
	return zero
}

// splitUnits is _split_units: the layers, plus one each for an embedding
// and a loss counted as layers.
func (p *pmodel) splitUnits() regonum.Num {
	c := p.c
	return c.Add(c.Add(p.layers(), p.flag("embedding_stage")), p.flag("loss_stage"))
}

// inFlight is _in_flight(schedule, pp, v, m).
func (p *pmodel) inFlight(schedule string, pp, v, m regonum.Num) regonum.Num {
	c := p.c
	switch schedule {
	case "1f1b", "zero_bubble":
		return regonum.Min(pp, m)
	case "interleaved":
		return c.Mul(regonum.Min(pp, m), c.Add(one, c.Div(c.Sub(pp, one), c.Mul(pp, v))))
	case "dualpipe":
		return regonum.Min(c.Add(pp, one), m)
	}
	return regonum.Num{}
}

// stageActivationBytes is _stage_activation_bytes.
func (p *pmodel) stageActivationBytes(tp, layers, cp, mbs, inFlight regonum.Num, ckpt string) regonum.Num {
	c := p.c
	if !layers.Defined() || !inFlight.Defined() {
		return regonum.Num{}
	}
	if ckpt == "full" {
		kept := c.Mul(c.Mul(layers, p.checkpointActivation(tp, cp, mbs)), inFlight)
		return c.Add(kept, p.layerActivation(tp, cp, mbs))
	}
	return c.Mul(c.Mul(layers, p.layerActivation(tp, cp, mbs)), inFlight)
}

// layerActivation is _layer_activation(tp, cp, mbs).
func (p *pmodel) layerActivation(tp, cp, mbs regonum.Num) regonum.Num {
	c := p.c
	tokens := c.Mul(c.Mul(c.Div(p.seq(), cp), mbs), p.hidden())
	perTP := c.Div(c.Add(eighteen, c.Div(c.Mul(four, p.mlpWidth()), p.hidden())), tp)
	return c.Mul(tokens, c.Add(perTP, c.Mul(ten, p.unsharded(tp))))
}

// mlpWidth is _mlp_width: ffn for a dense model, top_k × expert ffn +
// shared ffn for a MoE (a token keeps the activations of every expert it is
// routed to).
func (p *pmodel) mlpWidth() regonum.Num {
	c := p.c
	if !truthy(at(p.model, "moe")) {
		return p.ffn()
	}
	k := count(at(p.moe, "top_k"))
	if !k.Defined() {
		return regonum.Num{}
	}
	ffn := p.ffn()
	if !ffn.Defined() {
		return regonum.Num{}
	}
	expert := count(get(p.moe, p.hasMoe, "expert_ffn_hidden_size", ffn.JSON()))
	shared := num(get(p.moe, p.hasMoe, "shared_expert_ffn_hidden_size", zero.JSON()))
	if !expert.Defined() || !regonum.GreaterEq(shared, zero) || !regonum.Equal(shared, regonum.Floor(shared)) {
		return regonum.Num{}
	}
	return c.Add(c.Mul(k, expert), shared)
}

// checkpointActivation is _checkpoint_activation(tp, cp, mbs).
func (p *pmodel) checkpointActivation(tp, cp, mbs regonum.Num) regonum.Num {
	c := p.c
	return c.Mul(c.Mul(c.Mul(two, c.Div(p.seq(), cp)), mbs), c.Mul(p.hidden(), c.Add(c.Div(one, tp), p.unsharded(tp))))
}

// unsharded is _unsharded(tp): 1 − 1/tp without sequence parallel, else 0.
func (p *pmodel) unsharded(tp regonum.Num) regonum.Num {
	if sp, ok := at(p.par, "sequence_parallel"); ok && sp == false {
		return p.c.Sub(one, p.c.Div(one, tp))
	}
	return zero
}

// logits is _logits(tp, cp, mbs).
func (p *pmodel) logits(tp, cp, mbs regonum.Num) regonum.Num {
	c := p.c
	return c.Div(c.Mul(c.Mul(c.Mul(four, c.Div(p.seq(), cp)), mbs), p.vocab()), tp)
}

// bubbleOf is _bubble_of(schedule, pp, v, m).
func (p *pmodel) bubbleOf(schedule string, pp, v, m regonum.Num) regonum.Num {
	c := p.c
	if !pp.Defined() || !v.Defined() || !m.Defined() {
		return regonum.Num{}
	}
	switch schedule {
	case "1f1b", "interleaved":
		return c.Div(c.Sub(pp, one), c.Add(c.Mul(v, m), c.Sub(pp, one)))
	case "zero_bubble":
		return p.bubbleShare(c.Div(c.Sub(pp, one), three), m)
	case "dualpipe":
		return p.bubbleShare(regonum.Max(zero, c.Sub(c.Div(pp, two), one)), m)
	}
	return regonum.Num{}
}

func (p *pmodel) bubbleShare(idle, m regonum.Num) regonum.Num {
	return p.c.Div(idle, p.c.Add(m, idle))
}

// commSecondsAt is _comm_seconds_at: the data-parallel gradient reduction's seconds.
func (p *pmodel) commSecondsAt(dp, tp, pp, cp, ep, etp, z regonum.Num) regonum.Num {
	c := p.c
	for _, n := range []regonum.Num{dp, tp, pp, cp, ep, etp, z} {
		if !n.Defined() {
			return regonum.Num{}
		}
	}
	volume := c.Mul(c.Mul(c.Div(c.Mul(two, c.Sub(dp, one)), dp), c.Mul(p.paramsLocal(tp, pp, ep, etp), p.gradBytes)),
		p.zero3Factor(z, pp))
	perNode := regonum.Min(dp, regonum.Max(one, regonum.Floor(c.Div(p.gpn(), c.Mul(tp, cp)))))
	if !volume.Defined() || !perNode.Defined() {
		return regonum.Num{}
	}
	if regonum.Greater(dp, perNode) {
		if !p.hasFab {
			return regonum.Num{}
		}
		return c.Div(c.Div(volume, perNode), p.bytesPerS(p.fabric.gbpsPerGPU))
	}
	if !p.hasGPU {
		return regonum.Num{}
	}
	return c.Div(volume, p.bytesPerS(p.gpu.intraGBps))
}

func (p *pmodel) bytesPerS(gbps regonum.Num) regonum.Num {
	return p.c.Mul(p.c.Mul(p.m.par.efficiency, gbps), e9)
}

func (p *pmodel) zero3Factor(z, pp regonum.Num) regonum.Num {
	if regonum.Equal(effectiveStage(z, pp), three) {
		return p.m.par.zero3Factor
	}
	return one
}

// computeSecondsAt is _compute_seconds_at(ckpt, world).
func (p *pmodel) computeSecondsAt(ckpt string, world regonum.Num) regonum.Num {
	c := p.c
	if !p.hasGPU || !world.Defined() {
		return regonum.Num{}
	}
	factor := six
	if ckpt == "full" {
		factor = eight
	}
	flops := c.Mul(c.Mul(factor, p.activeParams()), c.Div(c.Mul(p.gbs(), p.seq()), world))
	effective := c.Mul(c.Mul(p.m.par.mfu, p.gpu.peakTFLOPS), e12)
	return c.Div(flops, effective)
}
