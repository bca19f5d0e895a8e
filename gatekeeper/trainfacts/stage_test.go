package trainfacts

import (
	"encoding/json"
	"reflect"
	"testing"
)

func jsonObj(t *testing.T, s string) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The effective manifest of a stage: its settings merged over the
// manifest key by key (nested objects again), stage_settings dropped,
// objective.stage the stage; the manifest itself unchanged; the function
// idempotent; a stage without settings keeps the manifest's own.
func TestStageManifest(t *testing.T) {
	const manifest = `{"name": "x",
		"objective": {"stage": "pretrain", "sequence_length": 8192, "global_batch_size": 64},
		"hardware": {"nodes": 8, "gpus_per_node": 8},
		"parallelism": {"tensor": 1, "context": 1, "pipeline_split": {"embedding_stage": true}},
		"stage_settings": {"long_context": {
			"objective": {"sequence_length": 32768},
			"hardware": {"nodes": 4},
			"parallelism": {"context": 4, "pipeline_split": {"loss_stage": true}}}}}`
	m := jsonObj(t, manifest)
	got := StageManifest(m, "long_context")
	want := jsonObj(t, `{"name": "x",
		"objective": {"stage": "long_context", "sequence_length": 32768, "global_batch_size": 64},
		"hardware": {"nodes": 4, "gpus_per_node": 8},
		"parallelism": {"tensor": 1, "context": 4, "pipeline_split": {"embedding_stage": true, "loss_stage": true}}}`)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("long_context:\n got %v\nwant %v", got, want)
	}
	if !reflect.DeepEqual(m, jsonObj(t, manifest)) {
		t.Fatal("StageManifest changed the manifest")
	}
	if again := StageManifest(got, "long_context"); !reflect.DeepEqual(again, got) {
		t.Fatalf("not idempotent: %v", again)
	}
	sft := StageManifest(m, "sft")
	base := jsonObj(t, manifest)
	delete(base, "stage_settings")
	base["objective"].(map[string]any)["stage"] = "sft"
	if !reflect.DeepEqual(sft, base) {
		t.Fatalf("sft (no settings):\n got %v\nwant %v", sft, base)
	}
}
