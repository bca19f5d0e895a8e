package admission_test

import (
	"testing"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/ticket"
)

// TestRunTopology: a renewed ticket carries what the run holds now: a run
// a stage advance grew gets world_size and nodes of its GPUs (on the
// ticket's gpus_per_node); a run holding the ticket's world_size or fewer
// keeps the ticket's; GPUs that are no whole number of nodes get no ticket.
func TestRunTopology(t *testing.T) {
	first := ticket.Claims{RunID: "run_1", WorldSize: 64, Nodes: 8, GPUsPerNode: 8, GPUType: "H100-SXM-80GB"}
	for _, tc := range []struct {
		gpus, worldSize, nodes int64
	}{{64, 64, 8}, {128, 128, 16}, {72, 72, 9}, {32, 64, 8}} {
		got, err := admission.RunTopology(first, int(tc.gpus))
		if err != nil || got.WorldSize != tc.worldSize || got.Nodes != tc.nodes || got.GPUsPerNode != 8 ||
			got.RunID != "run_1" || got.GPUType != "H100-SXM-80GB" {
			t.Errorf("RunTopology(%d GPUs) = %+v, %v; want world_size %d on %d nodes of 8", tc.gpus, got, err,
				tc.worldSize, tc.nodes)
		}
	}
	if got, err := admission.RunTopology(first, 100); err == nil {
		t.Errorf("RunTopology(100 GPUs on nodes of 8) = %+v; want an error", got)
	}
}
