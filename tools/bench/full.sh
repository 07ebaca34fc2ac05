#!/usr/bin/env bash
# tools/bench/full.sh — the long benchmarks `./test.sh --full` runs: the step path's CPU
# cost with a null worker (step_overhead.sh at 64 / 256 / 1,024 streams). Passes when
# every run completes with every request answered in full; prints the figures (they are
# reported, never asserted: these machines are shared and noisy).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${WEFT_BENCH_OUT:-/tmp/weft-bench-full-$(date +%s)}
mkdir -p "$OUT"
tools/bench/step_overhead.sh --concurrency 64,256,1024 --out "$OUT/step_overhead" \
  --json_out "$OUT/step_overhead.json"
