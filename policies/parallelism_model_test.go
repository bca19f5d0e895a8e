package policies

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/itocompute/itogate/schemas"
)

// generatedLayouts is how many random layouts TestParallelismModel checks
// (a quarter each dense, MoE, interleaved and context-parallel); under -race
// or -short it checks the first sampledLayouts of the same sequence (`make
// test` runs it once more without -race at the full count).
const (
	generatedLayouts = 2000
	sampledLayouts   = 160

	// memoryWarnFraction is the bundle's parallelism.memory_warn_fraction:
	// the share of GPU memory a fix's estimate must stay within
	memoryWarnFraction = 0.92
)

// TestParallelismModel holds the parallelism gate to two promises, on every
// fixture and on generatedLayouts random layouts:
//
//   - every deny's estimates.fix_layout, written back into the manifest
//     (nodes, degrees, micro batch, ZeRO stage, checkpointing, precision), is
//     a valid manifest that the same model admits (no parallelism deny);
//   - the model's memory, communication, bubble and token estimates agree
//     with estimate(), a second implementation of the formulas written from
//     their sources (policies/README.md, "Formulas"), not from the Rego.
//
// A disagreement prints the layout. The engine is compiled once and queried
// for the parallelism gate only.
func TestParallelismModel(t *testing.T) {
	q := prepareParallelism(t)
	tables := loadModelTables(t)
	schema := compileSchema(t, schemas.Manifest(), "https://itogate.dev/schemas/manifest.v1.json")

	var doc struct {
		Cases []fixtureCase `json:"cases"`
	}
	mustUnmarshal(t, mustReadFile(t, casesFile), &doc)
	fixes := 0
	for _, c := range doc.Cases {
		m := decode(t, mustReadFile(t, filepath.Join(manifestsDir, c.Manifest))).(map[string]any)
		res := evalParallelism(t, q, m)
		if problems := crossCheck(tables, m, res.Estimates); len(problems) > 0 {
			t.Errorf("%s: estimates disagree with the independent estimator: %v", c.Manifest, problems)
		}
		if len(res.Deny) > 0 {
			fix, ok := checkFix(t, q, schema, m, res)
			if ok {
				fixes++
			}
			if c.Manifest == "mixtral-8x7b-megatron-as-shipped.json" && (fix == nil || fix["on_booked_hardware"] != false) {
				// pipeline 4 → 1 on the booked node left ~90 GB of unsharded expert states per GPU
				t.Errorf("%s: fix %v, want a layout on more GPUs (no layout on one node holds Mixtral's states)", c.Manifest, fix)
			}
		}
	}
	if fixes == 0 {
		t.Error("no fixture's fix was checked")
	}

	// generated layouts on the llama3-8b fixture's other fields, checked by
	// two workers over one prepared query
	template := decode(t, mustReadFile(t, filepath.Join(manifestsDir, baseCase))).(map[string]any)
	count := generatedLayouts
	if raceDetector || testing.Short() {
		count = sampledLayouts
	}
	rng := rand.New(rand.NewPCG(14, 2026))
	layouts := make([]map[string]any, count)
	for i := range layouts {
		layouts[i] = generateLayout(rng, i%4, tables, template)
	}
	var mu sync.Mutex
	var denied, fixed, compared int
	var denyTime, allowTime time.Duration
	jobs := make(chan map[string]any)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range jobs {
				start := time.Now()
				res := evalParallelism(t, q, m)
				problems := crossCheck(tables, m, res.Estimates)
				var fixOK bool
				if len(res.Deny) > 0 {
					_, fixOK = checkFix(t, q, schema, m, res)
				}
				el := time.Since(start)
				mu.Lock()
				if len(res.Deny) > 0 {
					denyTime += el
				} else {
					allowTime += el
				}
				compared++
				if len(res.Deny) > 0 {
					denied++
				}
				if fixOK {
					fixed++
				}
				mu.Unlock()
				if len(problems) > 0 {
					t.Errorf("estimates disagree with the independent estimator: %v\nlayout: %s", problems, layoutText(m))
				}
			}
		}()
	}
	for _, m := range layouts {
		jobs <- m
	}
	close(jobs)
	wg.Wait()
	t.Logf("%d generated layouts compared, %d denied, %d fixes admitted (%v allows, %v denies)", compared, denied, fixed, allowTime, denyTime)
	if denied < count/10 || fixed < count/20 {
		t.Errorf("the generator produced %d denies and %d checked fixes: too few to test the fix search", denied, fixed)
	}
}

type parallelismResult struct {
	Deny      []string       `json:"deny"`
	Estimates map[string]any `json:"estimates"`
}

func prepareParallelism(t *testing.T) rego.PreparedEvalQuery {
	t.Helper()
	return prepareQuery(t, `x := {"deny": [v.code | some v in data.ito.parallelism.deny], "estimates": data.ito.parallelism.estimates}`)
}

// evalParallelism evaluates the parallelism gate for a manifest (it reads
// nothing but input.manifest and bundle data).
func evalParallelism(t *testing.T, q rego.PreparedEvalQuery, manifest map[string]any) parallelismResult {
	in := map[string]any{"manifest": manifest, "request": map[string]any{"action": "train.create"}}
	withFacts(t, in) // as the server does: the fix is the engine's layout search's
	rs, err := q.Eval(context.Background(), rego.EvalInput(in))
	if err != nil || len(rs) != 1 {
		t.Errorf("evaluate %s: %v (%d results)", layoutText(manifest), err, len(rs))
		return parallelismResult{}
	}
	raw, err := json.Marshal(rs[0].Bindings["x"])
	if err != nil {
		t.Fatal(err)
	}
	var res parallelismResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// checkFix writes a deny's fix_layout into a copy of the manifest and asserts
// the copy is a valid manifest that the model admits. It returns the fix and
// whether it was a layout (a deny may find none: "searched_nodes" only).
func checkFix(t *testing.T, q rego.PreparedEvalQuery, schema interface{ Validate(any) error }, m map[string]any, res parallelismResult) (map[string]any, bool) {
	fix, _ := res.Estimates["fix_layout"].(map[string]any)
	if fix == nil {
		t.Errorf("parallelism deny %v without estimates.fix_layout\nlayout: %s", res.Deny, layoutText(m))
		return nil, false
	}
	if _, ok := fix["tensor"]; !ok {
		if fix["on_booked_hardware"] != false || fix["searched_nodes"] == nil {
			t.Errorf("fix_layout %v is neither a layout nor a searched-nodes answer\nlayout: %s", fix, layoutText(m))
		}
		return fix, false
	}
	fixed := applyFix(m, fix)
	if err := schema.Validate(roundTripValue(fixed)); err != nil {
		t.Errorf("fix_layout %v is not a valid manifest: %v\nlayout: %s", fix, err, layoutText(m))
		return fix, false
	}
	again := evalParallelism(t, q, fixed)
	if len(again.Deny) > 0 {
		t.Errorf("fix_layout is denied %v by the model that suggested it\nlayout: %s\nfix:    %s", again.Deny, layoutText(m), layoutText(fixed))
		return fix, false
	}
	// within the memory margin a declared layout needs (no MEMORY_ESTIMATE_EXCEEDS_GPU)
	if mem, limit := num(again.Estimates["memory_gb_per_gpu"]), memoryWarnFraction*num(again.Estimates["gpu_memory_gb"]); !(mem <= limit+0.005) {
		t.Errorf("fix_layout needs %v GB per GPU, above the margin of %v GB\nfix: %s", mem, limit, layoutText(fixed))
		return fix, false
	}
	if best, ok := fix["best"].(map[string]any); ok {
		bestFix := maps.Clone(best)
		if again := evalParallelism(t, q, applyFix(m, bestFix)); len(again.Deny) > 0 ||
			num(again.Estimates["memory_gb_per_gpu"]) > memoryWarnFraction*num(again.Estimates["gpu_memory_gb"])+0.005 {
			t.Errorf("the best layout of the fix is denied %v or above the memory margin (%v GB)\nfix: %s",
				again.Deny, again.Estimates["memory_gb_per_gpu"], layoutText(applyFix(m, bestFix)))
			return fix, false
		}
	}
	for _, k := range []string{"model_states_gb_per_gpu", "memory_gb_per_gpu", "dp_comm_compute_ratio", "bubble_fraction"} {
		if !closeEnough(num(fix[k]), num(again.Estimates[k])) {
			t.Errorf("fix_layout.%s = %v, but the fixed manifest estimates %v\nfix: %s", k, fix[k], again.Estimates[k], layoutText(fixed))
		}
	}
	return fix, true
}

// applyFix returns a deep copy of the manifest with the fix's layout.
func applyFix(m map[string]any, fix map[string]any) map[string]any {
	out := roundTripValue(m).(map[string]any)
	hw := out["hardware"].(map[string]any)
	par := out["parallelism"].(map[string]any)
	obj := out["objective"].(map[string]any)
	hw["nodes"] = fix["nodes"]
	for _, k := range []string{"tensor", "pipeline", "context", "expert", "expert_tensor", "virtual_stages", "zero_stage",
		"activation_checkpointing", "precision", "pipeline_schedule"} {
		if v, ok := fix[k]; ok {
			par[k] = v
		}
	}
	par["data"] = fix["data"]
	obj["micro_batch_size"] = fix["micro_batch_size"]
	return out
}

func layoutText(m map[string]any) string {
	pick := func(section string, keys ...string) map[string]any {
		s, _ := m[section].(map[string]any)
		out := map[string]any{}
		for _, k := range keys {
			if v, ok := s[k]; ok {
				out[k] = v
			}
		}
		return out
	}
	model := pick("model", "name", "parameters", "layers", "hidden_size", "ffn_hidden_size", "attention_heads", "kv_heads", "vocab_size", "moe")
	b, _ := json.Marshal(map[string]any{
		"model": model, "hardware": pick("hardware", "gpu_type", "nodes", "gpus_per_node", "fabric"),
		"objective":   pick("objective", "sequence_length", "global_batch_size", "micro_batch_size"),
		"parallelism": m["parallelism"],
	})
	return string(b)
}

// ---------------------------------------------------------------------------
// The independent estimator: the formulas of policies/README.md ("Formulas"),
// from their sources (the ZeRO paper and DeepSpeed's estimators for model
// states; Megatron-LM's theoretical_memory_usage.py and Korthikanti et al.
// 2022 for activations; Narayanan et al. SC'21 for the interleaved penalty and
// the bubble; the scaling book for communication), in plain Go. Constants are
// the sources' (bytes per parameter, 18 + 4·ffn/h, 6/8 FLOPs per parameter
// and token) and the calibration the README states (3 GB overhead, 70 % of
// link bandwidth, 40 % of peak FLOPS, ZeRO-3 ×1.5 traffic); the GPU and
// fabric rows come from the bundle's tables.

type modelTables struct {
	gpus    map[string]gpuRow
	fabrics map[string]float64 // GB/s per GPU
}

type gpuRow struct {
	MemoryGB   float64  `json:"memory_gb"`
	TFLOPS     float64  `json:"peak_tflops_16bit"`
	Domain     float64  `json:"nvlink_domain"`
	IntraGBps  float64  `json:"intra_node_gbytes_per_s"`
	Precisions []string `json:"precisions"`
}

func loadModelTables(t testing.TB) modelTables {
	t.Helper()
	tab := modelTables{gpus: map[string]gpuRow{}, fabrics: map[string]float64{}}
	mustUnmarshal(t, mustReadFile(t, "ito/tables/gpus/data.json"), &tab.gpus)
	var fabrics map[string]struct {
		GBps float64 `json:"gbytes_per_s_per_gpu"`
	}
	mustUnmarshal(t, mustReadFile(t, "ito/tables/fabrics/data.json"), &fabrics)
	for name, f := range fabrics {
		tab.fabrics[name] = f.GBps
	}
	return tab
}

// estimate computes the figures the model reports; a key is absent when the
// layout leaves it undefined (dp or the microbatches not whole).
func estimate(tab modelTables, m map[string]any) map[string]float64 {
	model, hw, par, obj := sub(m, "model"), sub(m, "hardware"), sub(m, "parallelism"), sub(m, "objective")
	moe := sub(model, "moe")
	split := sub(par, "pipeline_split")
	gpu, ok := tab.gpus[str(hw["gpu_type"])]
	fabric, okF := tab.fabrics[str(hw["fabric"])]
	if !ok || !okF {
		return nil
	}
	P, L, h, V := num(model["parameters"]), num(model["layers"]), num(model["hidden_size"]), num(model["vocab_size"])
	ffn := numOr(model["ffn_hidden_size"], 4*h)
	Pexp, Pact := numOr(moe["expert_parameters"], 0), numOr(moe["active_parameters"], P)
	gpn := num(hw["gpus_per_node"])
	W := num(hw["nodes"]) * gpn
	tp, pp := num(par["tensor"]), num(par["pipeline"])
	cp, ep, etp, v := numOr(par["context"], 1), numOr(par["expert"], 1), numOr(par["expert_tensor"], 1), numOr(par["virtual_stages"], 1)
	zero := numOr(par["zero_stage"], 0)
	ckpt := strOr(par["activation_checkpointing"], "none")
	engine := strOr(par["engine"], "other")
	s, gbs, mbs := num(obj["sequence_length"]), num(obj["global_batch_size"]), num(obj["micro_batch_size"])

	out := map[string]float64{"tokens_per_gpu": gbs * s / W, "world": W}
	dp := W / (tp * pp * cp)
	if dp != math.Trunc(dp) {
		return out
	}
	// model states: dense over dp·cp, experts over edp = W/(ep·etp·pp) (at least one rank)
	stage := zero
	if stage == 3 && pp > 1 {
		stage = 1 // a pipeline stage keeps its weights and gradients
	}
	// gradient bytes in the data-parallel reduction (Megatron reduces in fp32 by default)
	g := 2.0
	switch {
	case str(par["gradient_reduce_precision"]) == "fp32":
		g = 4
	case str(par["gradient_reduce_precision"]) == "bf16":
	case str(par["precision"]) == "fp32", engine == "megatron", engine == "nemo":
		g = 4
	}
	// Megatron Core's distributed-optimizer guide: bytes per parameter kept on
	// every rank + bytes sharded over the d data-parallel ranks (d = 1 without
	// the distributed optimizer): fp16/bf16 params and grads 4 + 16/d, bf16
	// params with fp32 grads 6 + 12/d, fp32 params and grads 8 + 8/d
	megatronKept, megatronSharded := 4.0, 16.0
	switch {
	case str(par["precision"]) == "fp32":
		megatronKept, megatronSharded = 8, 8
	case g == 4:
		megatronKept, megatronSharded = 6, 12
	}
	megatron := engine == "megatron" || engine == "nemo"
	bpp := func(n float64) float64 {
		if b, ok := par["bytes_per_param"]; ok {
			return num(b)
		}
		switch {
		case megatron && stage == 0:
			return megatronKept + megatronSharded
		case megatron && stage == 1:
			return megatronKept + megatronSharded/n
		}
		switch stage {
		case 0:
			return 16
		case 1:
			return 4 + 12/n
		case 2:
			return 2 + 14/n
		default:
			return 16 / n
		}
	}
	schedule := strOr(par["pipeline_schedule"], "1f1b")
	if _, declared := par["pipeline_schedule"]; !declared && v > 1 {
		schedule = "interleaved"
	}
	denseLocal := (P - Pexp) / (tp * pp)
	expertLocal := Pexp / (ep * etp * pp)
	edp := math.Max(1, W/(ep*etp*pp))
	states := denseLocal*bpp(dp*cp) + expertLocal*bpp(edp)
	if schedule == "dualpipe" {
		states *= 2 // two pipeline chunks per rank (DeepSeek-V3 report, Table 2)
	}
	out["model_states_gb_per_gpu"] = states / 1e9
	out["bytes_per_param"] = bpp(dp * cp)

	// DP communication over compute
	vol := 2 * (dp - 1) / dp * (denseLocal + expertLocal) * g
	if stage == 3 {
		vol *= 1.5
	}
	k := math.Min(dp, math.Max(1, math.Floor(gpn/(tp*cp))))
	var tComm float64
	if dp > k {
		tComm = vol / k / (0.7 * fabric * 1e9)
	} else {
		tComm = vol / (0.7 * gpu.IntraGBps * 1e9)
	}
	flops := 6.0
	if ckpt == "full" {
		flops = 8
	}
	tComp := flops * Pact * (gbs * s / W) / (0.4 * gpu.TFLOPS * 1e12)
	out["dp_comm_compute_ratio"] = tComm / tComp

	mb := gbs / (mbs * dp)
	if mb != math.Trunc(mb) || mb < 1 {
		return out
	}
	out["microbatches"] = mb
	// bubble: (pp-1)/(v·m + pp-1) for 1F1B and interleaved (Narayanan et al.);
	// ZB-H1 idles a third of 1F1B's (pp-1) microbatch slots (Qi et al. 2024);
	// DualPipe pp/2 - 1 (DeepSeek-V3 report)
	switch schedule {
	case "zero_bubble":
		idle := (pp - 1) / 3
		out["bubble_fraction"] = idle / (mb + idle)
	case "dualpipe":
		idle := math.Max(0, pp/2-1)
		out["bubble_fraction"] = idle / (mb + idle)
	default:
		out["bubble_fraction"] = (pp - 1) / (v*mb + pp - 1)
	}

	// activations (Megatron theoretical_memory_usage.py, SP + flash attention)
	tokens := s / cp * mbs
	unsharded := 0.0 // without sequence parallel, LayerNorm/dropout and layer inputs are whole on every tp rank
	if par["sequence_parallel"] == false {
		unsharded = 1 - 1/tp
	}
	// MLP activations per token: ffn, or in a MoE layer top_k routed experts'
	// plus the shared experts' (each expert a token is routed to keeps them)
	width := ffn
	if len(moe) > 0 {
		width = num(moe["top_k"])*numOr(moe["expert_ffn_hidden_size"], ffn) + numOr(moe["shared_expert_ffn_hidden_size"], 0)
	}
	layer := tokens * h * ((18+4*width/h)/tp + 10*unsharded)
	kept := 2 * tokens * h * (1/tp + unsharded)
	stageBytes := func(layers, inFlight float64) float64 {
		if ckpt == "full" {
			return layers*kept*inFlight + layer
		}
		return layers * layer * inFlight
	}
	logits := 4 * tokens * V / tp
	var act float64
	if pp == 1 {
		act = stageBytes(L, 1) + logits
	} else {
		inFlight := math.Min(pp, mb)
		switch schedule {
		case "interleaved":
			inFlight *= 1 + (pp-1)/(pp*v)
		case "dualpipe":
			inFlight = math.Min(pp+1, mb)
		}
		// Megatron-LM's pipeline split: with the embedding and/or the loss
		// counted as layers, the end stages hold their share of L + 1 (+ 1)
		// units less that unit; an explicit per-stage layout gives them
		flag := func(k string) float64 {
			if split[k] == true {
				return 1
			}
			return 0
		}
		units := L + flag("embedding_stage") + flag("loss_stage")
		first := math.Max(0, math.Ceil(units/pp)-flag("embedding_stage"))
		last := math.Max(0, math.Ceil(units/pp)-flag("loss_stage"))
		if layout, ok := split["stage_layers"].([]any); ok && float64(len(layout)) == pp {
			first, last = num(layout[0]), num(layout[len(layout)-1])
		}
		first = numOr(split["first_stage_layers"], first)
		last = numOr(split["last_stage_layers"], last)
		act = math.Max(stageBytes(first, inFlight), stageBytes(last, 1)+logits)
	}
	out["activations_gb_per_gpu"] = act / 1e9
	out["memory_gb_per_gpu"] = (states+act)/1e9 + 3
	return out
}

// crossCheck compares the model's estimates with estimate(): every figure
// the estimator computes must be reported, within the model's rounding.
func crossCheck(tab modelTables, m map[string]any, got map[string]any) []string {
	want := estimate(tab, m)
	if want == nil {
		return []string{"the estimator has no table row for this GPU or fabric"}
	}
	var problems []string
	for k, w := range want {
		if k == "world" {
			k = "world_size"
		}
		g, ok := got[k]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s missing (want %.4g)", k, w))
			continue
		}
		if !closeEnough(num(g), w) {
			problems = append(problems, fmt.Sprintf("%s = %v, want %.4f", k, g, w))
		}
	}
	return problems
}

// closeEnough: the model rounds its estimates to 2 decimals
func closeEnough(got, want float64) bool {
	return math.Abs(got-want) <= 0.005+1e-9+1e-6*math.Abs(want)
}

// ---------------------------------------------------------------------------
// The layout generator: public model shapes on the bundle's GPUs and
// fabrics, each kind with its own knobs; mostly valid layouts, a share of
// them broken on purpose (world size, heads, memory, batch, layers).

type genModel struct {
	name                 string
	p, pexp, pact        float64
	layers, hidden, ffn  int
	heads, kv, vocab     int
	experts, topK        int
	expertFFN, sharedFFN int // 0: ffn / none
	headDim              int // 0: hidden / heads
}

var denseModels = []genModel{
	{name: "meta-llama/Llama-3.1-8B", p: 8.03e9, layers: 32, hidden: 4096, ffn: 14336, heads: 32, kv: 8, vocab: 128256},
	{name: "meta-llama/Llama-3.1-70B", p: 70.55e9, layers: 80, hidden: 8192, ffn: 28672, heads: 64, kv: 8, vocab: 128256},
	{name: "meta-llama/Llama-3.1-405B", p: 405.85e9, layers: 126, hidden: 16384, ffn: 53248, heads: 128, kv: 8, vocab: 128256},
	{name: "gpt3-175b", p: 175e9, layers: 96, hidden: 12288, ffn: 49152, heads: 96, kv: 96, vocab: 51200},
	{name: "allenai/OLMo-7B", p: 6.89e9, layers: 32, hidden: 4096, ffn: 11008, heads: 32, kv: 32, vocab: 50304},
}

var moeModels = []genModel{
	{name: "mistralai/Mixtral-8x7B-v0.1", p: 46.70e9, pexp: 45.10e9, pact: 12.88e9, layers: 32, hidden: 4096, ffn: 14336,
		heads: 32, kv: 8, vocab: 32000, experts: 8, topK: 2},
	{name: "deepseek-ai/DeepSeek-V3", p: 671e9, pexp: 653.9e9, pact: 37e9, layers: 61, hidden: 7168, ffn: 18432,
		heads: 128, kv: 128, vocab: 129280, experts: 256, topK: 8, expertFFN: 2048, sharedFFN: 2048},
	{name: "Qwen/Qwen3-30B-A3B", p: 30.5e9, pexp: 29.0e9, pact: 3.3e9, layers: 48, hidden: 2048, ffn: 6144,
		heads: 32, kv: 4, vocab: 151936, experts: 128, topK: 8, expertFFN: 768},
	{name: "zai-org/GLM-4.5-Air", p: 106e9, pexp: 99656663040, pact: 12e9, layers: 46, hidden: 4096, ffn: 10944,
		heads: 96, kv: 8, vocab: 151552, experts: 128, topK: 8, expertFFN: 1408, sharedFFN: 1408, headDim: 128},
}

// generateLayout draws layouts of one kind until one passes the plain
// rules by the estimator's numbers (so most generated layouts are admitted
// and cheap), then breaks a quarter of them on purpose — one of tp across
// the NVLink domain, a global batch that does not divide, too many stages,
// an ep that does not fit, fp8 on a GPU without it, too little memory, a
// Megatron layer split — so their denies and fixes are exercised too.
func generateLayout(rng *rand.Rand, kind int, tab modelTables, template map[string]any) map[string]any {
	var m map[string]any
	for range 200 {
		m = drawLayout(rng, kind, template)
		if plausible(tab, m) {
			break
		}
	}
	if rng.IntN(4) == 0 {
		breakLayout(rng, m)
	}
	return m
}

func drawLayout(rng *rand.Rand, kind int, template map[string]any) map[string]any {
	pick := func(xs ...int) int { return xs[rng.IntN(len(xs))] }
	gpus := []string{"A100-80GB", "H100-SXM-80GB", "H200", "B200", "GB200", "MI300X", "A100-40GB", "H100-PCIe", "L40S",
		"H100-96GB", "H100-NVL", "V100-32GB", "H800"}
	fabrics := []string{"infiniband-ndr-400g", "infiniband-xdr-800g", "infiniband-hdr-200g", "roce-v2-400g", "aws-efa-v2",
		"aws-efa-v1", "ethernet-100g", "gcp-tcpx", "ethernet-10g"}
	var mod genModel
	if kind == 1 {
		mod = moeModels[rng.IntN(len(moeModels))]
	} else {
		mod = denseModels[rng.IntN(len(denseModels))]
	}
	nodes := pick(1, 2, 4, 8, 16, 32, 64, 128)
	world := nodes * 8
	tp := pick(1, 2, 4, 8)
	for mod.heads%tp != 0 || (mod.kv%tp != 0 && tp%mod.kv != 0) {
		tp /= 2
	}
	pp := pick(1, 1, 2, 4, 8)
	cp, ep, v := 1, 1, 1
	seq := pick(2048, 4096, 8192)
	engine := []string{"torchtitan", "megatron", "nemo", "deepspeed", "fsdp", "other"}[rng.IntN(6)]
	par := map[string]any{}
	switch kind {
	case 1: // MoE: ep among the experts' divisors, sometimes etp
		ep = min(pick(1, 2, 4, 8, 8, 16, 32, 64), mod.experts)
		if rng.IntN(4) == 0 {
			par["expert_tensor"] = pick(1, 2)
		}
	case 2: // interleaved pipeline
		pp = pick(2, 4, 8)
		v = pick(2, 3, 4, 5)
		if engine != "megatron" && engine != "nemo" && rng.IntN(2) == 0 {
			engine = "megatron"
		}
	case 3: // context parallel on long sequences
		cp = pick(2, 4, 8, 16)
		seq = pick(16384, 32768, 131072, 524288)
	}
	for pp > 1 && world%(tp*pp*cp) != 0 {
		pp /= 2
	}
	if pp == 1 {
		v = 1
	}
	mbs := pick(1, 1, 2)
	dp := max(1, world/(tp*pp*cp))
	gbs := dp * mbs * max(pp, 1) * pick(1, 2, 4, 8)
	par["tensor"], par["pipeline"] = tp, pp
	if cp > 1 || rng.IntN(3) == 0 {
		par["context"] = cp
	}
	if ep > 1 || kind == 1 {
		par["expert"] = ep
	}
	if v > 1 || rng.IntN(5) == 0 {
		par["virtual_stages"] = v
	}
	par["zero_stage"] = pick(0, 1, 1, 2, 3)
	if engine == "deepspeed" && pp > 1 {
		par["zero_stage"] = pick(0, 1)
	}
	par["activation_checkpointing"] = []string{"none", "selective", "full", "full"}[rng.IntN(4)]
	par["precision"] = []string{"bf16", "bf16", "bf16", "fp8"}[rng.IntN(4)]
	if rng.IntN(8) == 0 {
		par["precision"] = "fp16"
	}
	par["engine"] = engine
	if rng.IntN(6) == 0 {
		par["gradient_reduce_precision"] = []string{"bf16", "fp32"}[rng.IntN(2)]
	}
	if tp > 1 && rng.IntN(4) == 0 {
		par["sequence_parallel"] = rng.IntN(2) == 0
	}
	switch {
	case v > 1 && rng.IntN(3) == 0:
		par["pipeline_schedule"] = "interleaved"
	case v == 1 && pp > 1 && rng.IntN(2) == 0:
		par["pipeline_schedule"] = []string{"1f1b", "zero_bubble", "dualpipe"}[rng.IntN(3)]
	}
	if (engine == "megatron" || engine == "nemo") && pp > 2 && mod.layers%(pp*v) != 0 {
		// a declared uneven split: the middle stages take equal chunks, the first and last the rest
		middle := mod.layers / (pp * v) * v
		ends := mod.layers - middle*(pp-2)
		if first := ends / 2; first >= 1 && ends-first >= 1 {
			par["pipeline_split"] = map[string]any{"first_stage_layers": first, "last_stage_layers": ends - first}
		}
	}
	out := roundTripValue(template).(map[string]any)
	model := map[string]any{
		"name": mod.name, "revision": sub(out, "model")["revision"],
		"parameters": int64(mod.p), "layers": mod.layers, "hidden_size": mod.hidden, "ffn_hidden_size": mod.ffn,
		"attention_heads": mod.heads, "kv_heads": mod.kv, "vocab_size": mod.vocab,
	}
	if mod.headDim > 0 {
		model["head_dim"] = mod.headDim
	}
	if mod.experts > 0 {
		moe := map[string]any{"experts": mod.experts, "top_k": mod.topK,
			"expert_parameters": int64(mod.pexp), "active_parameters": int64(mod.pact)}
		if mod.expertFFN > 0 {
			moe["expert_ffn_hidden_size"] = mod.expertFFN
		}
		if mod.sharedFFN > 0 {
			moe["shared_expert_ffn_hidden_size"] = mod.sharedFFN
		}
		model["moe"] = moe
	}
	out["model"] = model
	obj := sub(out, "objective")
	obj["sequence_length"], obj["global_batch_size"], obj["micro_batch_size"] = seq, gbs, mbs
	hw := sub(out, "hardware")
	hw["gpu_type"], hw["nodes"], hw["gpus_per_node"] = gpus[rng.IntN(len(gpus))], nodes, 8
	hw["fabric"] = fabrics[rng.IntN(len(fabrics))]
	out["parallelism"] = par
	return out
}

// plausible: the layout passes the plain rules by the estimator's numbers
// (the model is the judge; this only steers the generator).
func plausible(tab modelTables, m map[string]any) bool {
	e := estimate(tab, m)
	hw, par, model := sub(m, "hardware"), sub(m, "parallelism"), sub(m, "model")
	gpu := tab.gpus[str(hw["gpu_type"])]
	if _, ok := e["activations_gb_per_gpu"]; !ok {
		return false
	}
	pp, v, L := num(par["pipeline"]), numOr(par["virtual_stages"], 1), num(model["layers"])
	if e["microbatches"] < pp || pp*v > L || e["tokens_per_gpu"] < 512 {
		return false
	}
	ep := numOr(par["expert"], 1) * numOr(par["expert_tensor"], 1)
	if moe := sub(model, "moe"); ep > 1 && (int(num(moe["experts"]))%int(numOr(par["expert"], 1)) != 0 ||
		int(e["world"]/pp)%int(ep) != 0) {
		return false
	}
	return e["model_states_gb_per_gpu"]+3 <= 0.95*gpu.MemoryGB && e["memory_gb_per_gpu"] <= 1.2*gpu.MemoryGB &&
		e["dp_comm_compute_ratio"] <= 2 && e["bubble_fraction"] <= 0.5 &&
		slices.Contains(gpu.Precisions, str(par["precision"]))
}

func breakLayout(rng *rand.Rand, m map[string]any) {
	par, obj, hw := sub(m, "parallelism"), sub(m, "objective"), sub(m, "hardware")
	switch rng.IntN(10) {
	case 0:
		par["tensor"] = 16
	case 1:
		obj["global_batch_size"] = int(num(obj["global_batch_size"])) + 1
	case 2:
		par["pipeline"] = int(num(par["pipeline"])) * 2
	case 3:
		par["expert"] = 3
	case 4:
		hw["gpu_type"] = "A100-80GB"
		par["precision"] = "fp8"
	case 5:
		hw["nodes"] = max(1, int(num(hw["nodes"]))/8)
	case 6:
		par["engine"] = "megatron"
		par["pipeline"] = 3
		delete(par, "pipeline_split")
	case 7:
		hw["fabric"] = "ethernet-10g"
	case 8:
		par["pipeline_schedule"] = "interleaved"
		par["virtual_stages"] = 1
	case 9:
		hw["gpu_type"] = "V100-16GB"
	}
}

func sub(m map[string]any, k string) map[string]any {
	s, _ := m[k].(map[string]any)
	if s == nil {
		return map[string]any{}
	}
	return s
}

func num(x any) float64 {
	switch v := x.(type) {
	case float64:
		return v
	case int:
		return float64(v)
	case int64:
		return float64(v)
	case json.Number:
		f, _ := v.Float64()
		return f
	}
	return math.NaN()
}

func numOr(x any, def float64) float64 {
	if x == nil {
		return def
	}
	return num(x)
}

func str(x any) string { s, _ := x.(string); return s }

func strOr(x any, def string) string {
	if s, ok := x.(string); ok {
		return s
	}
	return def
}

// BenchmarkIndependentEstimator is the intrinsic cost of the parallelism
// gate's allow-path arithmetic: estimate() (the second, Go implementation of
// the formulas TestParallelismModel cross-checks) on the llama3-8b fixture.
// docs/performance.md sets it beside one evaluation of the whole decision,
// where OPA's evaluator, not the arithmetic, is the cost.
func BenchmarkIndependentEstimator(b *testing.B) {
	tab := loadModelTables(b)
	m := decode(b, mustReadFile(b, filepath.Join(manifestsDir, "llama3-8b.json"))).(map[string]any)
	if len(estimate(tab, m)) == 0 {
		b.Fatal("estimate() computed nothing for llama3-8b")
	}
	b.ReportAllocs()
	for b.Loop() {
		estimate(tab, m)
	}
}
