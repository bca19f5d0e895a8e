#!/usr/bin/env bash
# bench/soak.sh — `make soak`: resident memory of `itogate serve` over many
# admissions (the performance issue's "RSS ≤ 150 MiB after 1 million
# admissions, no growth from caches"). Runs the allow path (each request its
# own signed manifest and confirmation, a durable bbolt commit) in chunks of
# closed-loop load and records the server's memory after each chunk:
# VmRSS split into RssAnon (heap, stacks: what caches would grow) and RssFile
# (pages of the memory-mapped bbolt ledger, reclaimable page cache), VmHWM,
# and the ledger file size. Loopback only; every chunk is bounded.
#
#   SOAK_ADMISSIONS=100000  admissions to reach (1000000 for the issue's figure)
#   SOAK_CHUNK=20000        admissions per loadgen run (≤ 50000)
#   SOAK_WORKERS=16         closed-loop workers
#   ITOGATE_SERVE_FLAGS=    extra `itogate serve` flags
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
TOTAL=${SOAK_ADMISSIONS:-100000}
CHUNK=${SOAK_CHUNK:-20000}
WORKERS=${SOAK_WORKERS:-16}
OUT=bench/out/soak-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
TMP=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT

kib() { awk -v k="$1" '/^'"$1"':/ {print $2}' "/proc/$PID/status"; }
mib() { awk -v v="$1" 'BEGIN{printf "%.1f", v / 1024}'; }

$GO build -o bin/itogate ./cmd/itogate
$GO build -o bin/loadgen ./bench/loadgen
PORT=$(bin/loadgen -free-port)
# shellcheck disable=SC2086 # a word list of flags
bin/itogate serve --listen "127.0.0.1:$PORT" --data-dir "$TMP" ${ITOGATE_SERVE_FLAGS:-} > "$OUT/serve.log" 2>&1 &
PID=$!
for _ in $(seq 1 100); do curl -fsS -o /dev/null "http://127.0.0.1:$PORT/readyz" 2>/dev/null && break; sleep 0.1; done

{
  echo "# itogate soak $(date -u +%Y-%m-%dT%H:%M:%SZ): $TOTAL admissions (allow path, bbolt)"
  echo
  echo "- commit: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (dirty tree)'); nproc $(nproc)"
  echo
  echo "| admitted | elapsed s | allows/s (chunk) | VmRSS MiB | RssAnon MiB | RssFile MiB | VmHWM MiB | ledger MiB |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
} | tee "$OUT/summary.md"
row() { # admitted elapsed rate
  printf '| %d | %d | %s | %s | %s | %s | %s | %s |\n' "$1" "$2" "$3" \
    "$(mib "$(kib VmRSS)")" "$(mib "$(kib RssAnon)")" "$(mib "$(kib RssFile)")" "$(mib "$(kib VmHWM)")" \
    "$(awk -v b="$(stat -c %s "$TMP/ledger.db")" 'BEGIN{printf "%.1f", b / 1048576}')" | tee -a "$OUT/summary.md"
}
row 0 0 -
admitted=0
start=$(date +%s)
while [ "$admitted" -lt "$TOTAL" ]; do
  n=$((TOTAL - admitted < CHUNK ? TOTAL - admitted : CHUNK))
  # a booking per chunk (room for the chunk and loadgen's untimed sample allow):
  # every admitted run stays live, and one booking books
  # at most 2^20 nodes (131 072 runs of llama3-8b's 8 nodes)
  line=$(timeout 900 bin/loadgen -target itogate -url "http://127.0.0.1:$PORT" -path allow -mode closed \
    -workers "$WORKERS" -duration 10m -max "$n" -pool "$n" -label soak \
    -booking "bk_soak_$admitted" -booking-runs "$((n + 1))" 2>>"$OUT/loadgen.log")
  echo "$line" >> "$OUT/loadgen.md"
  ok=$(echo "$line" | awk -F'|' '{gsub(/ /, "", $5); print $5 + 0}')
  rate=$(echo "$line" | awk -F'|' '{gsub(/ /, "", $9); print $9}')
  [ "$ok" -gt 0 ] || { echo "soak: a chunk admitted nothing: $line" >&2; exit 1; }
  admitted=$((admitted + ok))
  row "$admitted" "$(( $(date +%s) - start ))" "$rate"
done
echo >> "$OUT/summary.md"
echo "report: $OUT/summary.md" >&2
