#!/usr/bin/env bash
# fgself end to end on the device machine: the recipe as it is, its engine and learner on
# the GPU (inference.device=cuda), then the same on that machine's CPU, $SECS seconds each
# (default 60), each run's figures from its own logs: agent steps/s, updates and their
# time (learner.jsonl), rounds' latency and rows (inference.jsonl), faults. The wheels
# of bench/device_wheels.sh; logs and the summary go to $OUT (or
# /tmp/device_run). Exit 0 when both runs ended without a fault or an answerer failure.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/device_run}
PY=${PY:-python3}
SECS=${SECS:-60}
RUNS=${RUNS:-/tmp/device_runs}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

source bench/device_wheels.sh
{ $PY setup.py -q build_ext --inplace && make -s build; } >"$OUT/build.log" 2>&1 \
  || { echo "device_run: the C parts did not build ($OUT/build.log):"; tail -20 "$OUT/build.log"; exit 2; }
nproc | sed 's/^/cores: /'

status=0
for dev in cuda cpu; do
  rm -rf "$RUNS/$dev"
  echo "== fgself, inference and learner on $dev, $SECS s"
  timeout $((SECS + 120)) $PY -m w3async run fgself --run "$dev" --runs-dir "$RUNS" \
    --set inference.device="$dev" --set stop.seconds="$SECS" >"$OUT/run_$dev.log" 2>&1
  echo "exit $?"; tail -4 "$OUT/run_$dev.log"
  $PY - "$RUNS/$dev" "$dev" <<'PY' | tee -a "$OUT/summary.txt" || status=1
import json, statistics, sys
from pathlib import Path
run, dev = Path(sys.argv[1]), sys.argv[2]
def lines(name):
    p = run / name
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []
shut = [e for e in lines("events.jsonl") if e.get("event") == "shutdown"]
if not shut:
    print(f"{dev}: no shutdown event in {run}/events.jsonl"); sys.exit(1)
s = shut[-1]
ups = [e for e in lines("learner.jsonl") if e.get("event") == "update"]
rounds = [e for e in lines("inference.jsonl") if e.get("event") == "rounds"]
med = lambda xs: statistics.median(xs) if xs else float("nan")
print(f"{dev}: {s['agent_steps']:,} agent steps in {s['seconds']:.1f} s = {s['agent_steps'] / s['seconds']:,.0f}/s; "
      f"{len(ups)} updates (median {med([u['update_s'] for u in ups]):.3f} s, {len(ups) / s['seconds']:.2f}/s); "
      f"rounds' mean latency, median of lines {med([r['latency_ms_mean'] for r in rounds]):.2f} ms, "
      f"network {med([r['net_ms_mean'] for r in rounds]):.2f} ms, rows a round {med([r['rows_per_round'] for r in rounds]):.1f}; "
      f"faults {s['faults']}, error {s['error']}, answerer failure {s['answerer_failure']}, cpu_s {s['cpu_s']:.0f}")
sys.exit(0 if not s["faults"] and not s["error"] and not s["answerer_failure"] else 1)
PY
done
exit $status
