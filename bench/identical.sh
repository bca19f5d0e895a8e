#!/usr/bin/env bash
# bench/identical.sh [REV] — decisions of this tree's policy against REV's
# (default 814edfb, before the policy-cost work) on every fixture, the
# manifests at the schema's limits and 4000 seeded random mutations
# (ITOGATE_BASELINE_MUTATIONS to change the count): any difference in a
# decision, its log mask or an evaluation error fails. Expected differences
# (a corrected model) show up here first: review them, then move REV.
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:-814edfb}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
git archive "$REV" policies | tar -x -C "$TMP"
ITOGATE_BASELINE_POLICIES="$TMP/policies" ${GO:-go} test -count=1 -run '^TestDecisionsMatchBaseline$' -v -timeout 60m ./gatekeeper/policy \
  | grep -E '^(=== RUN|--- |\s+baseline_test|ok|FAIL|PASS)' || { echo "identical: decisions differ from $REV" >&2; exit 1; }
