#!/usr/bin/env bash
# bench/buckets.sh BINARY PROFILE — CPU of a BenchmarkAdmit* profile split
# into the pipeline's parts. OPA's recursive evaluator is deeper than the
# profiler's stack limit, so its samples lose their callers: buckets are
# taken by -focus on each part's own frames, not by descent from
# postAdmission. Buckets can overlap slightly (e.g. GC assists inside OPA).
set -euo pipefail
bin=$1 prof=$2
total=$(go tool pprof -top -nodecount=1 "$bin" "$prof" 2>/dev/null | sed -n 's/.*Total samples = \([0-9.]*m\?s\).*/\1/p')
echo "total samples: $total"
while IFS='|' read -r name re; do
  v=$(go tool pprof -top -nodecount=100000 -nodefraction=0 -edgefraction=0 -focus="$re" "$bin" "$prof" 2>/dev/null \
      | sed -n 's/^Showing nodes accounting for \([0-9.]*m\?s, [0-9.]*%\) of .*/\1/p')
  printf '%-48s %s\n' "$name" "${v:-0}"
done <<'LIST'
OPA evaluation (topdown, any caller)|open-policy-agent/opa/v1/topdown
  of which regex.match builtin|topdown.builtinRegexMatch
policy mask query (Engine.Mask)|policy.\(\*Engine\).Mask
decision log secret guard (decisionlog.Guard)|decisionlog.Guard
decision log Prepare total|decisionlog.\(\*Logger\).Prepare
token verification (TokenVerifier.Verify)|verify.\(\*TokenVerifier\).Verify
manifest signature (ManifestVerifier.Verify)|verify.\(\*ManifestVerifier\).Verify
manifest schema (manifest.Parse)|manifest.Parse
request decode (strictjson)|strictjson.Decode
ledger (bbolt)|go.etcd.io/bbolt
GC background mark|runtime.gcBgMarkWorker
GC assist|runtime.gcAssistAlloc
deposits before the timed loop (postConfirmation)|postConfirmation
setup (policy.New bundle compile)|policy.New
LIST
