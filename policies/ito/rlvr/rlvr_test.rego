package ito.rlvr_test

import data.ito.rlvr

_base := data.ito.testdata.base.input

_set(path, value) := {"op": "add", "path": path, "value": value}

# verl recipe/dapo/run_dapo_qwen2.5_32b.sh: adv_estimator=grpo, clip_ratio_high 0.28,
# filter_groups, loss_agg_mode token-mean, overlong_buffer; rollout on its own workers
# (verl's one-step off-policy recipe) with at most one step of staleness.
_dapo := {
	"algorithm": "grpo",
	"dapo": {"clip_higher": true, "dynamic_sampling": true, "token_level_loss": true, "overlong_reward_shaping": true},
	"rollout": {"separated": true, "max_staleness_steps": 1},
}

test_dapo_recipe_passes[where] if {
	some where, patch in {
		"post_training": [_set("/manifest/post_training", [{"stage": "rlvr"}])],
		"objective": [_set("/manifest/objective/stage", "rlvr")],
		"stages": [_set("/manifest/stages", ["pretrain", "rlvr"])],
	}
	inp := json.patch(_base, array.concat(patch, [_set("/manifest/rlvr", _dapo)]))
	count(rlvr.deny) == 0 with input as inp
}

test_no_rlvr_stage_needs_no_recipe if {
	count(rlvr.deny) == 0 with input as _base
}

test_staleness_bound[name] if {
	some name, tc in {
		"at the bound": {"n": 2, "want": set()},
		"above the bound": {"n": 3, "want": {"RLVR_STALENESS_EXCEEDED"}},
		"fractional": {"n": 1.5, "want": {"RLVR_STALENESS_EXCEEDED"}},
		"negative": {"n": -1, "want": {"RLVR_STALENESS_EXCEEDED"}},
	}
	inp := json.patch(_base, [
		_set("/manifest/post_training", [{"stage": "rlvr"}]),
		_set("/manifest/rlvr", json.patch(_dapo, [_set("/rollout/max_staleness_steps", tc.n)])),
	])
	{v.code | some v in rlvr.deny with input as inp} == tc.want
}
