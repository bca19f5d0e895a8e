#!/usr/bin/env bash
# bench/run.sh — `make bench`: Go micro-benchmarks per admission stage, a CPU
# profile of the whole handler, then the same load shapes against
# `itogate serve` and `opa run --server` on loopback. Everything is bounded
# (durations, request caps, a timeout per step) and only 127.0.0.1 is used.
# Results land in bench/out/<UTC timestamp>/ (summary.md is the report).
#
#   BENCH_DURATION=10s   timed phase of each load step
#   BENCH_RATE=200       open-loop rate (req/s)
#   BENCH_HIGH_RATE=1000 open-loop rate of the p99 target (deny path)
#   BENCH_LOW_RATE=40    open-loop rate below 2-core capacity (latency without queueing)
#   BENCH_WORKERS=16     closed-loop workers
#   BENCH_BENCHTIME=1s   go test -benchtime for the stage benchmarks
#   BENCH_PROFILE_N=1500 admissions in the profiled BenchmarkAdmitAllow
#   ITOGATE_SERVE_FLAGS= extra `itogate serve` flags (e.g. "--policy-deadline 2s")
#   BENCH_BASELINE=814edfb the commit bench/compare.sh measures HEAD against
#                        (COMPARE_ROUNDS, COMPARE_BENCHTIME: see bench/compare.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
DUR=${BENCH_DURATION:-10s}
RATE=${BENCH_RATE:-200}
HIGH=${BENCH_HIGH_RATE:-1000}
LOW=${BENCH_LOW_RATE:-40}
WORKERS=${BENCH_WORKERS:-16}
BT=${BENCH_BENCHTIME:-1s}
PROFN=${BENCH_PROFILE_N:-1500}
OUT=bench/out/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
SUM=$OUT/summary.md
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
load() { echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"; }
rss() { grep -E '^(VmRSS|VmHWM)' "/proc/$1/status" | tr -s ' \t' ' ' | paste -sd' '; }
say() { echo "$@" | tee -a "$SUM"; }

{
  echo "# itogate bench $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (dirty tree)')"
  echo "- go: $($GO version | cut -d' ' -f3-)"
  echo "- nproc: $(nproc); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "- memory: $(grep MemTotal /proc/meminfo | tr -s ' ')"
  echo "- $(load) at start"
  echo
} | tee "$SUM"

echo "== build" >&2
$GO build -o bin/itogate ./cmd/itogate
$GO build -o bin/loadgen ./bench/loadgen
$GO build -o bin/opa github.com/open-policy-agent/opa

echo "== stage benchmarks (benchtime $BT)" >&2
say "## Stage benchmarks (go test -bench -benchmem -benchtime $BT; $(load))"
say
{
  timeout 600 $GO test -run '^$' -bench 'BenchmarkDecodeAdmission' -benchmem -benchtime "$BT" ./gatekeeper/strictjson
  timeout 600 $GO test -run '^$' -bench 'BenchmarkParse|BenchmarkDigest' -benchmem -benchtime "$BT" ./gatekeeper/manifest
  timeout 600 $GO test -run '^$' -bench 'BenchmarkTokenVerify|BenchmarkManifestVerify|BenchmarkFloor' -benchmem -benchtime "$BT" ./gatekeeper/verify
  timeout 600 $GO test -run '^$' -bench 'BenchmarkDecide' -benchmem -benchtime "$BT" ./gatekeeper/policy
  timeout 600 $GO test -run '^$' -bench 'BenchmarkCommit$/p=16/shipped|BenchmarkCommitSerial/shipped' -benchmem -benchtime "$BT" -cpu 2 ./gatekeeper/ledger/bolt
} 2>&1 | tee "$OUT/stages.txt" >&2
say '```'
grep -E '^Benchmark' "$OUT/stages.txt" | tee -a "$SUM"
say '```'
say "$(load) after"
say

echo "== whole-handler benchmark + CPU profile ($PROFN admissions)" >&2
timeout 600 $GO test -run '^$' -bench 'BenchmarkAdmitAllow' -benchmem -benchtime "${PROFN}x" \
  -cpuprofile "$OUT/admit-allow.cpu.pprof" -o "$OUT/server.test" ./gatekeeper/server 2>&1 | tee "$OUT/handler.txt" >&2
timeout 600 $GO test -run '^$' -bench 'BenchmarkAdmitDeny' -benchmem -benchtime "${PROFN}x" \
  -cpuprofile "$OUT/admit-deny.cpu.pprof" ./gatekeeper/server 2>&1 | tee -a "$OUT/handler.txt" >&2
$GO tool pprof -top -nodecount=40 "$OUT/server.test" "$OUT/admit-allow.cpu.pprof" > "$OUT/pprof-allow-top.txt" 2>/dev/null || true
$GO tool pprof -top -cum -nodecount=60 "$OUT/server.test" "$OUT/admit-allow.cpu.pprof" > "$OUT/pprof-allow-cum.txt" 2>/dev/null || true
# The admissions alone (setup and deposits left out):
$GO tool pprof -top -focus=postAdmission -nodecount=40 "$OUT/server.test" "$OUT/admit-allow.cpu.pprof" > "$OUT/pprof-allow-admission-top.txt" 2>/dev/null || true
$GO tool pprof -top -cum -focus=postAdmission -nodecount=80 "$OUT/server.test" "$OUT/admit-allow.cpu.pprof" > "$OUT/pprof-allow-admission-cum.txt" 2>/dev/null || true
$GO tool pprof -top -cum -nodecount=60 "$OUT/server.test" "$OUT/admit-deny.cpu.pprof" > "$OUT/pprof-deny-cum.txt" 2>/dev/null || true
say "## Whole handler (httptest, real router, 16 goroutines; $(load))"
say '```'
grep -E '^Benchmark' "$OUT/handler.txt" | tee -a "$SUM"
say '```'
say

ROW_HEAD='| run | shape | requests | ok | shed 503 | wrong status | errors | ok req/s | p50 ms | p90 ms | p99 ms | max ms | ok p50 ms | ok p99 ms | note |'
ROW_SEP='|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|'

step() { # label, loadgen args...
  local label=$1; shift
  echo "== $label ($(load))" >&2
  local row c0 c1 ok
  c0=$(cpu_ticks "$CUR_PID")
  row=$(timeout 300 bin/loadgen -label "$label" "$@" 2> >(tee -a "$OUT/loadgen.log" >&2)) || row="| $label | failed: see loadgen.log |"
  c1=$(cpu_ticks "$CUR_PID")
  ok=$(echo "$row" | awk -F'|' '{gsub(/ /, "", $5); print $5 + 0}')
  local per="n/a"
  [ "$ok" -gt 0 ] && per=$(awk -v d=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v n="$ok" 'BEGIN{printf "%.2f", d * 1000 / hz / n}')
  echo "${row%|}| $per | $(load); server $(rss "$CUR_PID") |" >> "$OUT/rows.md"
  echo "$row" >&2
}

shapes() { # target, url, deny label, allow label: the same seven load shapes for every target
  local t=$1 url=$2 deny=$3 allow=$4
  step "$deny"  -target "$t" -url "$url" -path deny  -mode closed -workers "$WORKERS" -duration "$DUR"
  step "$allow" -target "$t" -url "$url" -path allow -mode closed -workers "$WORKERS" -duration "$DUR"
  step "$deny"  -target "$t" -url "$url" -path deny  -mode open -rate "$RATE" -duration "$DUR"
  step "$allow" -target "$t" -url "$url" -path allow -mode open -rate "$RATE" -duration "$DUR"
  step "$deny"  -target "$t" -url "$url" -path deny  -mode open -rate "$LOW" -duration "$DUR"
  step "$allow" -target "$t" -url "$url" -path allow -mode open -rate "$LOW" -duration "$DUR"
  step "$deny"  -target "$t" -url "$url" -path deny  -mode open -rate "$HIGH" -duration "$DUR"
}

wait_up() { # url
  for _ in $(seq 1 100); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "bench: $1 did not come up" >&2; return 1
}

echo "== itogate serve" >&2
PORT=$(bin/loadgen -free-port)
# shellcheck disable=SC2086 # ITOGATE_SERVE_FLAGS is a word list, e.g. "--policy-deadline 2s"
bin/itogate serve --listen "127.0.0.1:$PORT" --data-dir "$TMP/itogate" ${ITOGATE_SERVE_FLAGS:-} > "$OUT/serve.log" 2>&1 &
IPID=$!; PIDS+=("$IPID"); CUR_PID=$IPID
wait_up "http://127.0.0.1:$PORT/readyz"
IURL=http://127.0.0.1:$PORT
: > "$OUT/rows.md"
shapes itogate "$IURL" "itogate deny" "itogate allow"
ADMITTED=$(grep -c '"decision":"allow"' "$OUT/serve.log" 2>/dev/null || true)
echo "itogate after the load: $(rss "$IPID")" > "$OUT/rss.txt"
kill "$IPID"; wait "$IPID" 2>/dev/null || true

echo "== opa run --server" >&2
PORT=$(bin/loadgen -free-port)
bin/opa run --server --addr "127.0.0.1:$PORT" --log-level error --skip-version-check \
  --ignore testdata --ignore '*_test.rego' policies > "$OUT/opa.log" 2>&1 &
OPID=$!; PIDS+=("$OPID"); CUR_PID=$OPID
wait_up "http://127.0.0.1:$PORT/health"
OURL=http://127.0.0.1:$PORT
shapes opa "$OURL" "opa deny input" "opa allow input"
echo "opa after the load: $(rss "$OPID")" >> "$OUT/rss.txt"
kill "$OPID"; wait "$OPID" 2>/dev/null || true

say "## Load (loopback; loadgen shares the same $(nproc) cores)"
say
say "$ROW_HEAD server CPU ms per ok request (allow: deposits included) | load; server RSS after the step |"
say "$ROW_SEP---|---|"
tee -a "$SUM" < "$OUT/rows.md"
say
say "RSS: $(paste -sd';' "$OUT/rss.txt")"
say
say "## CPU profile, BenchmarkAdmitAllow (go tool pprof -top, first lines)"
say '```'
head -n 30 "$OUT/pprof-allow-top.txt" | tee -a "$SUM"
say '```'
say "(whole run incl. setup: $OUT/pprof-allow-top.txt; cumulative: $OUT/pprof-allow-admission-cum.txt; deny: $OUT/pprof-deny-cum.txt)"
say
say "## Where the allow CPU goes (bench/buckets.sh; whole profile incl. deposits and setup)"
say '```'
bench/buckets.sh "$OUT/server.test" "$OUT/admit-allow.cpu.pprof" 2>/dev/null | tee -a "$SUM" || true
say '```'
say "Deny:"
say '```'
bench/buckets.sh "$OUT/server.test" "$OUT/admit-deny.cpu.pprof" 2>/dev/null | tee -a "$SUM" || true
say '```'
say "## Policy cost: ${BENCH_BASELINE:-814edfb} vs HEAD and OPA, same run (bench/compare.sh)"
say
if bench/compare.sh "${BENCH_BASELINE:-814edfb}" HEAD > "$OUT/compare.md"; then
  tee -a "$SUM" < "$OUT/compare.md"
else
  say "bench/compare.sh failed: see its output above"
fi
say "$(load) at end"
echo "bench: report in $SUM" >&2
