#!/usr/bin/env bash
# bench/compare-webhook.sh OLD [NEW] — the webhook's CPU per review at two
# commits, measured in ONE run on this machine, interleaved round by round
# so that other load hits both sides alike.
#
#   OLD and NEW (default HEAD) are exported with git archive (a dirty tree is
#   not measured) and their gatekeeper/webhook test binaries built. Per round
#   and side: BenchmarkWebhookPodReview (verify=each and verify=cached),
#   BenchmarkWebhookTrainingPodReview (a commit without it shows no row) and
#   the OPA peer, at -cpu 1, reporting cpu-s/review (process CPU, GC
#   included), B/op and allocs/op. The summary gives medians over the rounds
#   and the ratio NEW/OLD (< 1: NEW is cheaper).
#
#   COMPARE_ROUNDS=5 COMPARE_BENCHTIME=2000x
#   Output: bench/out/compare-webhook-<UTC time>/{summary.md,raw.txt}
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
OLD=${1:?usage: bench/compare-webhook.sh OLD [NEW]}
NEW=${2:-HEAD}
ROUNDS=${COMPARE_ROUNDS:-5}
BT=${COMPARE_BENCHTIME:-2000x}
OUT=bench/out/compare-webhook-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
RAW=$OUT/raw.txt

echo "== build $OLD and $NEW" >&2
for side in old new; do
  rev=$OLD; [ "$side" = new ] && rev=$NEW
  mkdir -p "$TMP/$side"
  git archive "$rev" | tar -x -C "$TMP/$side"
  (cd "$TMP/$side" && $GO test -c -o "$TMP/$side.test" ./gatekeeper/webhook)
done

: > "$RAW"
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  for side in old new; do
    (cd "$TMP/$side/gatekeeper/webhook" && "$TMP/$side.test" -test.run '^$' \
      -test.bench 'BenchmarkWebhookPodReview|BenchmarkWebhookTrainingPodReview|BenchmarkOPAPeerPodReview' \
      -test.benchtime "$BT" -test.cpu 1 -test.benchmem) |
      grep -E '^Benchmark' | sed "s/^/$side /" >> "$RAW"
  done
done

python3 - "$RAW" "$OLD" "$NEW" "$ROUNDS" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" > "$OUT/summary.md" <<'PY'
import re, statistics, sys
raw, old, new, rounds, nproc, load = sys.argv[1:]
rows = {}
for line in open(raw):
    parts = line.split()
    side, name = parts[0], re.sub(r'-\d+$', '', parts[1])
    vals = {parts[i + 1]: float(parts[i]) for i in range(3, len(parts) - 1, 2)}
    rows.setdefault(name, {}).setdefault(side, []).append(vals)
def med(side_rows, unit):
    xs = [r[unit] for r in side_rows if unit in r]
    return statistics.median(xs) if xs else None
print(f"# webhook CPU per review: {old} vs {new}\n")
print(f"{rounds} interleaved rounds at -cpu 1, medians; {nproc} CPUs, load at end {load}\n")
print(f"| benchmark | measure | {old} | {new} | {new} / {old} |")
print("|---|---|---:|---:|---:|")
for name in sorted(rows):
    for unit, label, scale in (("cpu-s/review", "CPU ms", 1e3), ("allocs/op", "allocations", 1), ("B/op", "bytes", 1)):
        o, n = med(rows[name].get("old", []), unit), med(rows[name].get("new", []), unit)
        if o is None or n is None:
            continue
        print(f"| {name} | {label} | {o*scale:.3f} | {n*scale:.3f} | {n/o:.2f} |")
PY
cat "$OUT/summary.md"
