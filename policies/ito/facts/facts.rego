# METADATA
# title: Training facts (Rego reference)
# description: >-
#   input.facts as the bundle's formulas compute them: the reference Go's
#   facts model (gatekeeper/trainfacts) is held to, byte for byte
#   (TestFactsMatchReference), and what the gates read when an input carries
#   no facts (opa test, opa eval). The parallelism, checkpoint and budget
#   gates read their own part; Go checks the version before every decision.
package ito.facts

import data.ito.budget
import data.ito.checkpoint
import data.ito.datasets
import data.ito.lib
import data.ito.manifest
import data.ito.parallelism

# METADATA
# title: Facts reference
# description: >-
#   {version, credentials, manifest, parallelism, checkpoint, budget} for
#   train.create and train.stage.advance (manifest, the field check, of the
#   manifest as written; the others, for the advance, of the effective
#   manifest of the stage it enters, lib.train_manifest), {version,
#   credentials} for any other action (the credential scan, of the manifest
#   as written, feeds the log mask whatever the action; the other gates that
#   read facts run for those two only). version is the facts model this bundle was written for
#   (data.ito.config.facts.model_version).
reference := {
	"version": data.ito.config.facts.model_version,
	"credentials": datasets.facts_reference,
	"manifest": manifest.facts_reference,
	"parallelism": parallelism.facts_reference,
	"checkpoint": checkpoint.facts_reference,
	"budget": budget.facts_reference,
} if {
	lib.runs_training_gates
}

reference := {
	"version": data.ito.config.facts.model_version,
	"credentials": datasets.facts_reference,
} if {
	not lib.runs_training_gates
}
