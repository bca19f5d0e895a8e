package trainfacts

import "maps"

// StageAction is the action whose training facts are those of the stage it
// enters (StageManifest), not of the manifest as written.
const StageAction = "train.stage.advance"

// StageManifest is the effective manifest of a stage: manifest without its
// stage_settings, with stage_settings[stage] merged over it and
// objective.stage set to stage. The merge is Rego's object.union: key by
// key, nested objects merged again, any other value of the settings
// replacing the manifest's. A stage without settings keeps the manifest's
// objective, hardware and parallelism. The result shares no map with
// manifest that it changes; StageManifest of its own result for the same
// stage is that result again. lib.stage_manifest is the same function in
// the bundle (policies/ito/lib), and TestFactsMatchReference holds the
// facts of both equal.
func StageManifest(manifest map[string]any, stage any) map[string]any {
	base := maps.Clone(manifest)
	delete(base, "stage_settings")
	var settings map[string]any
	if name, ok := stage.(string); ok {
		settings, _ = objAt(manifest, "stage_settings", name)
	}
	eff := union(base, settings)
	return union(eff, map[string]any{"objective": map[string]any{"stage": stage}})
}

// union is object.union(a, b): b's keys over a's, two objects under one key
// merged again. Neither argument is changed.
func union(a, b map[string]any) map[string]any {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]any{}
	}
	for k, bv := range b {
		ao, aIsObj := out[k].(map[string]any)
		bo, bIsObj := bv.(map[string]any)
		if aIsObj && bIsObj {
			out[k] = union(ao, bo)
			continue
		}
		out[k] = bv
	}
	return out
}

// stageDoc is doc with its manifest replaced by the effective manifest of
// the stage a train.stage.advance enters (request.stage), the document
// whose facts the advance is judged by; doc itself is returned for any
// other action, and for an advance without a manifest object or a stage.
func stageDoc(doc map[string]any) map[string]any {
	if action, _ := at(doc, "request", "action"); action != StageAction {
		return doc
	}
	manifest, isObj := doc["manifest"].(map[string]any)
	stage, hasStage := at(doc, "request", "stage")
	if !isObj || !hasStage {
		return doc
	}
	out := maps.Clone(doc)
	out["manifest"] = StageManifest(manifest, stage)
	return out
}
