#!/usr/bin/env bash
# bench/run.sh — `make bench`: Go micro-benchmarks per admission stage, a CPU
# profile of the whole handler, then the same load shapes against
# `itogate serve` and `opa run --server` on loopback, then Pod admission
# reviews over HTTPS against itogate's Kubernetes webhook and an
# `opa run --server` peer deciding with the same ito.workload policy
# (bench/webhook-peer). Everything is bounded
# (durations, request caps, a timeout per step) and only 127.0.0.1 is used.
# Results land in bench/out/<UTC timestamp>/ (summary.md is the report).
#
#   BENCH_DURATION=10s   timed phase of each load step
#   BENCH_RATE=200       open-loop rate (req/s)
#   BENCH_HIGH_RATE=1000 open-loop rate of the p99 target (deny path)
#   BENCH_LOW_RATE=40    open-loop rate below 2-core capacity (latency without queueing)
#   BENCH_WEBHOOK_RATE=1000     open-loop Pod reviews/s against the webhooks (a 1 024-GPU job's 128 Pods at once)
#   BENCH_WEBHOOK_LOW_RATE=200  the webhooks' lower open-loop rate, for context
#   BENCH_ONLY=webhook   only the webhook steps (its in-process benchmark and its load)
#   BENCH_QUEUE_WAIT=40ms  itogate's --max-queue-wait for a second deny step at BENCH_HIGH_RATE
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
QWAIT=${BENCH_QUEUE_WAIT:-40ms}
WH_RATE=${BENCH_WEBHOOK_RATE:-1000}
WH_LOW=${BENCH_WEBHOOK_LOW_RATE:-200}
ONLY=${BENCH_ONLY:-}
case "$ONLY" in "" | webhook) ;; *) echo "bench: BENCH_ONLY must be empty or webhook" >&2; exit 2 ;; esac
all() { [ -z "$ONLY" ]; }
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

if all; then
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
fi # all

echo "== webhook review in process (benchtime $BT)" >&2
say "## Webhook review in process (go test -bench -benchmem -benchtime $BT ./gatekeeper/webhook; $(load))"
say
timeout 600 $GO test -run '^$' -bench 'BenchmarkWebhookPodReview|BenchmarkOPAPeerPodReview' -benchmem -benchtime "$BT" \
  ./gatekeeper/webhook 2>&1 | tee "$OUT/webhook-inproc.txt" >&2
say '```'
grep -E '^Benchmark' "$OUT/webhook-inproc.txt" | tee -a "$SUM"
say '```'
say
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
  echo "${row%|}| $per | $(load); server $(rss "$CUR_PID") |" >> "${ROWS_FILE:-$OUT/rows.md}"
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

wait_up() { # url [curl options]
  for _ in $(seq 1 100); do curl -fsS -o /dev/null "${@:2}" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "bench: $1 did not come up" >&2; return 1
}

: > "$OUT/rss.txt"
if all; then
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
echo "itogate after the load: $(rss "$IPID")" >> "$OUT/rss.txt"
kill "$IPID"; wait "$IPID" 2>/dev/null || true

# The same deny step at HIGH with a short queue: under sustained overload the
# served rate is the evaluation capacity whatever the queue allows, and the
# wait bound (limits.max_queue_wait, default 1s) sets the served latency.
echo "== itogate serve --max-queue-wait $QWAIT" >&2
PORT=$(bin/loadgen -free-port)
# shellcheck disable=SC2086
bin/itogate serve --listen "127.0.0.1:$PORT" --data-dir "$TMP/itogate-qwait" --max-queue-wait "$QWAIT" \
  ${ITOGATE_SERVE_FLAGS:-} > "$OUT/serve-qwait.log" 2>&1 &
IPID=$!; PIDS+=("$IPID"); CUR_PID=$IPID
wait_up "http://127.0.0.1:$PORT/readyz"
step "itogate deny, max-queue-wait $QWAIT" -target itogate -url "http://127.0.0.1:$PORT" -path deny -mode open -rate "$HIGH" -duration "$DUR"
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
fi # all

# The Kubernetes webhook: one admitted run whose Job is bound, then the
# Pods of that Job reviewed over HTTPS (loopback, a self-signed certificate)
# at WH_LOW and WH_RATE per second, open loop, by itogate's webhook listener
# and by `opa run --server` with the same ito.workload policy, verifying the
# same ticket with io.jwt.decode_verify (OPA's default configuration, then
# with its io_jwt verification cache on, as itogate's ticket cache is).
# loadgen checks each target allows the review and refuses the same review
# with one changed signature byte before measuring.
echo "== webhook: itogate serve --webhook-listen" >&2
WH=$TMP/webhook; mkdir -p "$WH"
bin/loadgen -write-cert "$WH"
PORT=$(bin/loadgen -free-port); HPORT=$(bin/loadgen -free-port)
bin/itogate serve --listen "127.0.0.1:$PORT" --data-dir "$TMP/itogate-webhook" \
  --webhook-listen "127.0.0.1:$HPORT" --webhook-cert-file "$WH/cert.pem" --webhook-key-file "$WH/key.pem" \
  --webhook-namespace team-a=acct_demo > "$OUT/serve-webhook.log" 2>&1 &
IPID=$!; PIDS+=("$IPID"); CUR_PID=$IPID
wait_up "http://127.0.0.1:$PORT/readyz"
wait_up "https://127.0.0.1:$HPORT/healthz" --cacert "$WH/cert.pem"
timeout 120 bin/loadgen -webhook-setup "$WH/state.json" -url "http://127.0.0.1:$PORT" \
  -webhook-url "https://127.0.0.1:$HPORT" -ca-file "$WH/cert.pem" 2> >(tee -a "$OUT/loadgen.log" >&2)
ROWS_FILE=$OUT/webhook-rows.md; : > "$ROWS_FILE"
whsteps() { # target, url, label
  step "$3" -target "$1" -url "$2" -state "$WH/state.json" -ca-file "$WH/cert.pem" -mode open -rate "$WH_LOW" -duration "$DUR"
  step "$3" -target "$1" -url "$2" -state "$WH/state.json" -ca-file "$WH/cert.pem" -mode open -rate "$WH_RATE" -duration "$DUR"
}
whsteps webhook "https://127.0.0.1:$HPORT" "itogate webhook"
echo "itogate webhook after the load: $(rss "$IPID")" >> "$OUT/rss.txt"
kill "$IPID"; wait "$IPID" 2>/dev/null || true

for variant in default io_jwt-cache; do
  echo "== webhook: opa run --server ($variant)" >&2
  OPORT=$(bin/loadgen -free-port)
  OPA_SET=()
  [ "$variant" = io_jwt-cache ] && OPA_SET=(--set caching.inter_query_builtin_value_cache.named.io_jwt.disabled=false
    --set caching.inter_query_builtin_value_cache.named.io_jwt.max_num_entries=1024)
  bin/opa run --server --addr "127.0.0.1:$OPORT" --tls-cert-file "$WH/cert.pem" --tls-private-key-file "$WH/key.pem" \
    --log-level error --skip-version-check "${OPA_SET[@]}" --ignore testdata --ignore '*_test.rego' \
    policies bench/webhook-peer "$WH/state.json" > "$OUT/opa-webhook-$variant.log" 2>&1 &
  OPID=$!; PIDS+=("$OPID"); CUR_PID=$OPID
  wait_up "https://127.0.0.1:$OPORT/health" --cacert "$WH/cert.pem"
  whsteps opa-webhook "https://127.0.0.1:$OPORT" "opa webhook peer ($variant)"
  echo "opa webhook peer ($variant) after the load: $(rss "$OPID")" >> "$OUT/rss.txt"
  kill "$OPID"; wait "$OPID" 2>/dev/null || true
done
unset ROWS_FILE

if all; then
say "## Load (loopback; loadgen shares the same $(nproc) cores)"
say
say "$ROW_HEAD server CPU ms per ok request (allow: deposits included) | load; server RSS after the step |"
say "$ROW_SEP---|---|"
tee -a "$SUM" < "$OUT/rows.md"
say
fi
say "## Kubernetes webhook: Pod reviews over HTTPS, open loop (loopback; loadgen shares the same $(nproc) cores)"
say
say "Served = answered allowed within the shipped timeoutSeconds (5 s); neither side sheds load: every other answer is a refusal or an error."
say
say "$ROW_HEAD server CPU ms per served review | load; server RSS after the step |"
say "$ROW_SEP---|---|"
tee -a "$SUM" < "$OUT/webhook-rows.md"
say
for shape in "open $WH_LOW/s" "open $WH_RATE/s"; do
  awk -F'|' -v shape="$shape" '
    function t(s) { gsub(/^ +| +$/, "", s); return s }
    t($3) == shape { n++; L[n] = t($2); req[n] = t($4); ok[n] = t($5); shed[n] = t($6); bad[n] = t($7) + t($8)
                     p50[n] = t($10); p99[n] = t($12); cpu[n] = t($17) }
    END {
      for (i = 1; i <= n; i++)
        printf "- %s, %s: p50 %s ms, p99 %s ms, served %s of %s, shed %s, refused or failed %s, server CPU %s ms per served review\n", L[i], shape, p50[i], p99[i], ok[i], req[i], shed[i], bad[i], cpu[i]
      for (i = 2; i <= n; i++)
        if (p99[1] + 0 > 0 && ok[1] + 0 > 0 && cpu[1] + 0 > 0)
          printf "- %s / %s, %s: p99 %.2fx, served %.2fx, CPU per served review %.2fx\n", L[i], L[1], shape, p99[i] / p99[1], ok[i] / ok[1], cpu[i] / cpu[1]
    }' "$OUT/webhook-rows.md" | tee -a "$SUM"
done
say
say "RSS: $(paste -sd';' "$OUT/rss.txt")"
say
if all; then
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
fi # all
say "$(load) at end"
echo "bench: report in $SUM" >&2
