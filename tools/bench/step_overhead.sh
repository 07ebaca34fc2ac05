#!/usr/bin/env bash
# tools/bench/step_overhead.sh — the CPU cost of the step path without a GPU: builds
# weft-scheduler, weft-worker and weft-bench (-c opt), then runs tools/bench/step_overhead.py
# (a fresh scheduler + `weft-worker --backend=null` per run, weft-bench closed loop at each
# concurrency; scheduler CPU us per generated token, worker host us per step, ...).
#
#   tools/bench/step_overhead.sh [--concurrency 64,256,1024] [--repeats 3]
#       [--requests_per_stream 8] [--min_requests 6000] [--trace sharegpt-like] [--workers 1]
#       [--null_step_ms 0] [--max_steps_in_flight 1] [--scheduler_flags "..."]
#       [--worker_flags "..."] [--interval_s 0.5] [--window 0.2 0.8] [--out DIR]
#       [--json_out FILE] [--perf [--perf_hz 999]] [--no_build]
# Every flag but --no_build is step_overhead.py's (see its docstring for the columns).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=1
ARGS=()
for a in "$@"; do
  if [ "$a" = "--no_build" ]; then BUILD=0; else ARGS+=("$a"); fi
done
if [ "$BUILD" = 1 ]; then
  bazel build -c opt //scheduler/service:weft-scheduler //worker/service:weft-worker \
    //tools/bench:weft-bench >&2
fi
BIN=$(bazel info -c opt bazel-bin 2>/dev/null)
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
exec "$PY" tools/bench/step_overhead.py --bin_dir="$BIN" \
  --model="$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf" "${ARGS[@]}"
