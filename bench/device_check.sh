#!/usr/bin/env bash
# Issues 13 and 26's device check, in one go on one GPU machine, from a fresh clone (docs/performance.md,
# "Inference rounds"): the CUDA tests (learner, GRU path, sampling, the engine's rounds, the CUDA runner's
# own code), then bench/device_check.py in the run's own configuration (one net, three nets, three
# nets with GRU: graphs, capture time and memory after capture, latency per bucket and rows against
# eager, syncs, no capture after start, memory over 10,000 rounds; the finisher's CPU; noise between
# two nets; a publish during rounds in flight; rounds beside an update at pause 0 and 8 with the
# switch interval at its default and at 0.5 ms; CPU against GPU; torch and CUDA beside the pin), each
# figure against its bound. At most 6 minutes with its set-up (the tests 100 s, the check 230 s);
# logs go to $OUT (or /tmp/device_check). Exit 0 only when the tests pass and every bound holds.
#
# The machine's Python lacks some packages: bench/device_wheels.sh says how to carry them.
# There: bash bench/device_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/device_check}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

source bench/device_wheels.sh
$PY setup.py -q build_ext --inplace >"$OUT/build.log" 2>&1 || echo "device_check: the C gather did not build (numpy path; $OUT/build.log)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())" | tee -a "$OUT/gpu.txt"

echo "== the CUDA tests"
timeout 100 $PY -m pytest -q -p no:cacheprovider tests/learn/test_inference.py tests/learn/test_learner.py \
  tests/learn/test_cuda_runner.py -k cuda -rs \
  2>&1 | tee "$OUT/cuda_tests.log"
tests=${PIPESTATUS[0]}

echo "== bench/device_check.py"
timeout 230 $PY bench/device_check.py --progress 2>&1 | tee "$OUT/device_check.log"
check=${PIPESTATUS[0]}

echo "device_check.sh: CUDA tests exit $tests, device_check.py exit $check (0 = every bound held)"
[ "$tests" = 0 ] && [ "$check" = 0 ]
