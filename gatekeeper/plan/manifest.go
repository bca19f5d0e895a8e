package plan

import (
	"encoding/json"
	"strconv"

	"github.com/itocompute/itogate/internal/jsonvalue"
)

// Apply returns a deep copy of manifest with layout l written into it:
// hardware.nodes, the parallelism degrees, ZeRO stage, activation
// checkpointing and precision, objective.micro_batch_size, and
// parallelism.data set to the layout's data-parallel degree. The pipeline
// schedule is written only when the manifest declares one (otherwise the
// gate infers it from virtual_stages, as the search did). Numbers are
// json.Number, as the manifest parser returns them.
func Apply(manifest map[string]any, l Layout) map[string]any {
	out, _ := jsonvalue.Clone(manifest).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	hw := section(out, "hardware")
	par := section(out, "parallelism")
	obj := section(out, "objective")
	gpn, _ := countOf(hw["gpus_per_node"])
	hw["nodes"] = number(l.Nodes)
	par["tensor"] = number(l.TP)
	par["pipeline"] = number(l.PP)
	par["context"] = number(l.CP)
	par["expert"] = number(l.EP)
	par["expert_tensor"] = number(l.ETP)
	par["virtual_stages"] = number(l.V)
	par["zero_stage"] = number(l.Zero)
	par["activation_checkpointing"] = l.Checkpointing
	par["precision"] = l.Precision
	if _, declared := par["pipeline_schedule"]; declared {
		par["pipeline_schedule"] = l.Schedule
	}
	if group := l.TP * l.PP * l.CP; gpn > 0 && group > 0 {
		par["data"] = number(l.Nodes * gpn / group)
	}
	obj["micro_batch_size"] = number(l.MBS)
	return out
}

func section(m map[string]any, key string) map[string]any {
	s, ok := m[key].(map[string]any)
	if !ok {
		s = map[string]any{}
		m[key] = s
	}
	return s
}

func number(n int) json.Number { return json.Number(strconv.Itoa(n)) }
