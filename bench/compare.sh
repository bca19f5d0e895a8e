#!/usr/bin/env bash
# bench/compare.sh [OLD [NEW]] — policy evaluation cost of two commits and of
# OPA on the same bundle, measured in ONE run on this machine, interleaved
# round by round so that other load hits every side alike.
#
#   OLD (default 814edfb: before the policy-cost work), NEW (default HEAD)
#   are exported with git archive (a dirty tree is not measured) and built.
#   Per round and side:
#     itogate  gatekeeper/policy BenchmarkDecideCPU at -cpu 1: cpu-ns/op
#              (process CPU, GC included), ns/op, B/op, allocs/op
#     opa-eval `opa bench` (the prepared query `opa eval` runs) on the same
#              bundle directory and input: ns/op, allocs/op
#     opa-http `opa bench --e2e` (a real `opa run --server` handler,
#              POST /v1/data): ns/op, allocs/op
#   Inputs are what itogate builds (bench/loadgen -write-input), for the
#   fixtures llama3-8b (allow) and llama2-70b-v100-fsdp (deny + fix). The
#   summary gives medians over the rounds and the ratios OLD/NEW and
#   OPA/NEW (> 1: NEW is cheaper), OLD/NEW also round by round (median and
#   range: on a shared VM a burst inflates one side of one round, and a
#   side that runs 2.5 times shorter is hit more often), and NEW's
#   manifests at the schema's limits against llama3-8b.
#
#   COMPARE_INSTRUCTIONS=1 adds, after the rounds, the instructions per
#   decision of each side (valgrind's callgrind, which counts instructions
#   of every thread, the GC's included: the same count on a loaded machine
#   as on a quiet one). Each side's BenchmarkDecideCPU runs at N1 and N2
#   decisions (COMPARE_INSTRUCTIONS_N="200 1000") and a decision costs
#   (I(N2) - I(N1)) / (N2 - N1): the set-up (compiling the bundle,
#   activating the facts model) cancels, and the GC cycles of N2 - N1
#   decisions are counted in full. About 20 minutes on one core; Go's
#   asynchronous preemption is off (GODEBUG=asyncpreemptoff=1), as
#   callgrind aborts on its signals.
#
#   COMPARE_ROUNDS=5 COMPARE_BENCHTIME=200x OPA_BENCH_COUNT=1
#   Output: bench/out/compare-<UTC time>/{summary.md,raw.txt}
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
OLD=${1:-814edfb}
NEW=${2:-HEAD}
ROUNDS=${COMPARE_ROUNDS:-5}
BT=${COMPARE_BENCHTIME:-200x}
OUT=bench/out/compare-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
RAW=$OUT/raw.txt
FIXTURES=(llama3-8b llama2-70b-v100-fsdp)

echo "== build $OLD and $NEW" >&2
for side in old new; do
  rev=$OLD; [ "$side" = new ] && rev=$NEW
  mkdir -p "$TMP/$side"
  git archive "$rev" | tar -x -C "$TMP/$side"
  (cd "$TMP/$side" && $GO test -c -o "$TMP/$side.test" ./gatekeeper/policy)
done
(cd "$TMP/new" && $GO build -o "$TMP/opa" github.com/open-policy-agent/opa \
  && $GO build -o "$TMP/loadgen" ./bench/loadgen)
for f in "${FIXTURES[@]}"; do "$TMP/loadgen" -write-input "$f" > "$TMP/$f.input.json"; done

opa_bench() { # side fixture [--e2e]
  local side=$1 f=$2; shift 2
  "$TMP/opa" bench "$@" --format gobench --count "${OPA_BENCH_COUNT:-1}" --benchmem \
    -b "$TMP/$side/policies" --ignore schemas --ignore testdata --ignore '*_test.rego' \
    -i "$TMP/$f.input.json" 'data.ito.admission.decision' 2>/dev/null | grep -E '^Benchmark' || true
}

: > "$RAW"
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  for side in old new; do
    pat='BenchmarkDecideCPU/(llama3-8b|llama2-70b-v100-fsdp)$'
    [ "$side" = new ] && pat='BenchmarkDecideCPU/'
    (cd "$TMP/$side/gatekeeper/policy" && "$TMP/$side.test" -test.run '^$' -test.bench "$pat" \
      -test.benchtime "$BT" -test.cpu 1 -test.benchmem) | grep -E '^Benchmark' | sed "s/^/$side itogate /" >> "$RAW"
    for f in "${FIXTURES[@]}"; do
      opa_bench "$side" "$f" | sed "s/^/$side opa-eval-$f /" >> "$RAW"
      opa_bench "$side" "$f" --e2e | sed "s/^/$side opa-http-$f /" >> "$RAW"
    done
  done
done

if [ "${COMPARE_INSTRUCTIONS:-0}" = 1 ]; then
  command -v valgrind >/dev/null || { echo "compare: COMPARE_INSTRUCTIONS=1 needs valgrind" >&2; exit 1; }
  read -r N1 N2 <<< "${COMPARE_INSTRUCTIONS_N:-200 1000}"
  for f in "${FIXTURES[@]}"; do
    for side in old new; do
      for n in "$N1" "$N2"; do
        echo "== instructions: $side $f ${n}x" >&2
        ir=$(cd "$TMP/$side/gatekeeper/policy" && GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind \
          --callgrind-out-file=/dev/null "$TMP/$side.test" -test.run '^$' -test.bench "BenchmarkDecideCPU/$f\$" \
          -test.benchtime "${n}x" -test.cpu 1 2>&1 | sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
        [ -n "$ir" ] || { echo "compare: callgrind gave no count for $side $f" >&2; exit 1; }
        echo "$side callgrind $f $n $ir" >> "$RAW"
      done
    done
  done
fi

python3 - "$RAW" "$OLD" "$NEW" "$ROUNDS" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" > "$OUT/summary.md" <<'PY'
import re, statistics, sys
raw, old, new, rounds, nproc, load = sys.argv[1:]
rows, instr = {}, {}
for line in open(raw):
    parts = line.split()
    side, tool, name = parts[0], parts[1], parts[2]
    if tool == 'callgrind':  # side callgrind fixture decisions instructions
        instr.setdefault((side, name), {})[int(parts[3])] = int(parts[4])
        continue
    fixture = None
    m = re.match(r'BenchmarkDecideCPU/([\w.-]+?)(?:-\d+)?$', name)
    if tool == 'itogate' and m:
        fixture = m.group(1)
    elif tool.startswith('opa-'):
        fixture = tool.split('-', 2)[2]
        tool = '-'.join(tool.split('-')[:2])
    if not fixture:
        continue
    vals = {}
    for v, unit in zip(parts[4::2], parts[5::2]):
        try:
            vals[unit] = float(v)
        except ValueError:
            pass
    for unit, v in vals.items():
        rows.setdefault((side, tool, fixture, unit), []).append(v)

def med(side, tool, fixture, unit):
    v = rows.get((side, tool, fixture, unit))
    return statistics.median(v) if v else None

def fmt(x, scale=1.0):
    return '-' if x is None else f'{x / scale:,.0f}'.replace(',', ' ')

def ratio(a, b):
    return '-' if a is None or b is None or b == 0 else f'{a / b:.2f}'

print(f'# policy cost, {old} vs {new}, one run\n')
print(f'- {rounds} interleaved rounds; medians; nproc {nproc}; load at the end {load}')
print('- itogate: BenchmarkDecideCPU -cpu 1 (cpu-ns/op = process CPU incl. GC); opa: `opa bench` (eval) and `opa bench --e2e` (HTTP server)\n')
# old/new within each round (both sides ran minutes apart, so load that
# comes and goes hits a round's pair alike): median [lowest-highest]
def paired(tool, fixture, unit):
    o, n = rows.get(('old', tool, fixture, unit)), rows.get(('new', tool, fixture, unit))
    if not o or not n or len(o) != len(n) or 0 in n:
        return '-'
    rs = sorted(a / b for a, b in zip(o, n))
    return f'{statistics.median(rs):.2f} [{rs[0]:.2f}-{rs[-1]:.2f}]'

print('| fixture | measure | itogate old | itogate new | old/new | old/new per round | opa eval (new bundle) | opa eval/new | opa http (new bundle) | opa http/new |')
print('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|')
for f in ['llama3-8b', 'llama2-70b-v100-fsdp']:
    for unit, label in [('cpu-ns/op', 'CPU µs'), ('ns/op', 'wall µs'), ('allocs/op', 'allocs'), ('B/op', 'KiB')]:
        scale = {'cpu-ns/op': 1e3, 'ns/op': 1e3, 'allocs/op': 1, 'B/op': 1024}[unit]
        o, n = med('old', 'itogate', f, unit), med('new', 'itogate', f, unit)
        oe, oh = med('new', 'opa-eval', f, unit), med('new', 'opa-http', f, unit)
        print(f'| {f} | {label} | {fmt(o, scale)} | {fmt(n, scale)} | {ratio(o, n)} | {paired("itogate", f, unit)} | {fmt(oe, scale)} | {ratio(oe, n)} | {fmt(oh, scale)} | {ratio(oh, n)} |')
print()
print('| OPA on the old bundle | measure | opa eval | opa http |')
print('|---|---|---:|---:|')
for f in ['llama3-8b', 'llama2-70b-v100-fsdp']:
    for unit, label, scale in [('ns/op', 'wall µs', 1e3), ('allocs/op', 'allocs', 1)]:
        print(f"| {f} | {label} | {fmt(med('old', 'opa-eval', f, unit), scale)} | {fmt(med('old', 'opa-http', f, unit), scale)} |")
print()
# instructions per decision: the difference between the two runs of a side
def per_decision(side, f):
    runs = instr.get((side, f), {})
    if len(runs) != 2:
        return None
    (n1, i1), (n2, i2) = sorted(runs.items())
    return (i2 - i1) / (n2 - n1)
if instr:
    print('| fixture | instructions per decision (callgrind) | old | new | old/new |')
    print('|---|---|---:|---:|---:|')
    for f in ['llama3-8b', 'llama2-70b-v100-fsdp']:
        o, n = per_decision('old', f), per_decision('new', f)
        mil = lambda x: '-' if x is None else f'{x / 1e6:.1f}'
        print(f'| {f} | millions | {mil(o)} | {mil(n)} | {ratio(o, n)} |')
    print()
base = med('new', 'itogate', 'llama3-8b', 'cpu-ns/op')
lim = sorted({k[2] for k in rows if k[0] == 'new' and k[2].startswith('limits-')})
if lim:
    print('| manifest at the schema limits (new) | CPU µs | × llama3-8b | allocs |')
    print('|---|---:|---:|---:|')
    for f in lim:
        c = med('new', 'itogate', f, 'cpu-ns/op')
        print(f"| {f} | {fmt(c, 1e3)} | {ratio(c, base)} | {fmt(med('new', 'itogate', f, 'allocs/op'))} |")
PY
cat "$OUT/summary.md"
echo "compare: $OUT/summary.md" >&2
