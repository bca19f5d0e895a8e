#!/usr/bin/env bash
# bench/identical.sh [REV] — decisions of this tree's policy against REV's
# (default 814edfb, before the policy-cost work) on every fixture, the
# manifests at the schema's limits and 4000 seeded random mutations
# (ITOGATE_BASELINE_MUTATIONS to change the count): any difference in a
# decision, its log mask or an evaluation error fails. Expected differences
# (a corrected model) show up here first: review them, then move REV.
#
# IDENTICAL_FACTS_VERSION=N declares REV's bundle written for facts model N
# (this tree's): for a REV one facts version back whose facts are a subset
# of this one's (a version that only added a part, as 4 added manifest:
# REV's gates never read the new part), so that it decides on this Go's facts.
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:-814edfb}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
git archive "$REV" policies | tar -x -C "$TMP"
if [ -n "${IDENTICAL_FACTS_VERSION:-}" ]; then
  f="$TMP/policies/ito/config/facts/data.json"
  sed -i -E "s/\"model_version\": [0-9]+/\"model_version\": $IDENTICAL_FACTS_VERSION/" "$f"
  grep -q "\"model_version\": $IDENTICAL_FACTS_VERSION" "$f" || { echo "identical: cannot set $f" >&2; exit 1; }
fi
ITOGATE_BASELINE_POLICIES="$TMP/policies" ${GO:-go} test -count=1 -run '^TestDecisionsMatchBaseline$' -v -timeout 60m ./gatekeeper/policy \
  | grep -E '^(=== RUN|--- |\s+baseline_test|ok|FAIL|PASS)' || { echo "identical: decisions differ from $REV" >&2; exit 1; }
