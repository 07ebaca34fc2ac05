#!/usr/bin/env bash
# tools/bench/compare.sh — the serving comparisons of BENCHMARKS.md in one command: starts
# the servers it is asked for on loopback, drives them with weft-bench (same seeded trace,
# runs interleaved A B A B ...), writes the tables, JSON and a plot, and stops them.
#
#   tools/bench/compare.sh [--targets weft,llama] [--trace sharegpt-like]
#       [--num_requests 128] [--concurrency 64] [--pairs 3] [--out DIR]
#       [--llama_bin DIR] [--weft_worker_flags "..."] [--weft_scheduler_flags "..."]
#
# Targets (comma list; the first is the one the ratios are computed for):
#   weft         weft-scheduler (decode-first) + one CPU weft-worker, default flags
#   weft-static  the same with --policy=static (the static-batching baseline)
#   llama        llama.cpp's llama-server from --llama_bin (default: $LLAMA_BIN, or the build
#                tools/refdata's README describes), -t <cores> -np 64 -c 131072 (2048
#                tokens per slot: every sharegpt-like request fits). Measured here, this
#                is its faster setting: 49.4 vs 36.8 output tok/s with -c 65536
#                --kv-unified (sharegpt-like, 64 requests at 64, one pair).
# The worker and llama-server each get every core (-t / --threads = nproc); they never
# run at the same time (weft-bench runs one target at a time).
# Output: weft-bench's table on stdout; logs and results under --out (default
# /tmp/weft-compare-<time>).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
TARGETS=weft,llama
TRACE=sharegpt-like
NUM=128
CONC=64
PAIRS=3
OUT=/tmp/weft-compare-$(date +%s)
LLAMA_BIN=${LLAMA_BIN:-/work/ref/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin}
WORKER_FLAGS=""
SCHED_FLAGS=""
MODEL=$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
while [ $# -gt 0 ]; do
  case "$1" in
    --targets) TARGETS=$2; shift 2 ;;
    --trace) TRACE=$2; shift 2 ;;
    --num_requests) NUM=$2; shift 2 ;;
    --concurrency) CONC=$2; shift 2 ;;
    --pairs) PAIRS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --llama_bin) LLAMA_BIN=$2; shift 2 ;;
    --weft_worker_flags) WORKER_FLAGS=$2; shift 2 ;;
    --weft_scheduler_flags) SCHED_FLAGS=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
log() { echo "compare.sh: $*" >&2; }
CORES=$(nproc)
bazel build -c opt //scheduler/service:weft-scheduler //worker/service:weft-worker \
  //tools/bench:weft-bench //tools/cli:weft >&2
BIN=$(bazel info -c opt bazel-bin 2>/dev/null)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

port=17000
URLS=()
METRICS=()
start_weft() {  # label, extra scheduler flags
  local label=$1 extra=$2 p=$port
  port=$((port + 10))
  "$BIN/scheduler/service/weft-scheduler" --model="$MODEL" --host=127.0.0.1 --port=$p --worker_port=$((p + 1)) \
    --metrics_port=$((p + 2)) $extra $SCHED_FLAGS >"$OUT/$label-scheduler.log" 2>&1 &
  PIDS+=($!)
  "$BIN/worker/service/weft-worker" --scheduler=127.0.0.1:$((p + 1)) --model="$MODEL" \
    --replica=r0 --threads="$CORES" --kv_memory_bytes=$((2 << 30)) $WORKER_FLAGS \
    >"$OUT/$label-worker.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 120); do
    "$BIN/tools/cli/weft" health --server=127.0.0.1:$p >/dev/null 2>&1 && break
    sleep 0.5
  done
  "$BIN/tools/cli/weft" health --server=127.0.0.1:$p >/dev/null 2>&1 ||
    { log "$label did not become healthy (see $OUT/$label-*.log)"; exit 1; }
  log "$label: grpc://127.0.0.1:$p (metrics :$((p + 2)))"
  URLS+=("$label=grpc://127.0.0.1:$p")
  METRICS+=("$label=http://127.0.0.1:$((p + 2))/metrics")
}
start_llama() {
  local p=$port
  port=$((port + 10))
  [ -x "$LLAMA_BIN/llama-server" ] || { log "no llama-server in $LLAMA_BIN (--llama_bin)"; exit 1; }
  "$LLAMA_BIN/llama-server" -m "$MODEL" -t "$CORES" -np 64 -c 131072 --port $p \
    --host 127.0.0.1 >"$OUT/llama-server.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$p/health" >/dev/null 2>&1 && break
    sleep 0.5
  done
  curl -sf "http://127.0.0.1:$p/health" >/dev/null || { log "llama-server did not start"; exit 1; }
  log "llama: http://127.0.0.1:$p"
  URLS+=("llama=http://127.0.0.1:$p")
}
IFS=, read -ra WANT <<<"$TARGETS"
for t in "${WANT[@]}"; do
  case "$t" in
    weft) start_weft weft "" ;;
    weft-static) start_weft weft-static "--policy=static" ;;
    llama) start_llama ;;
    *) log "unknown target $t"; exit 2 ;;
  esac
done
grep -m1 "model name" /proc/cpuinfo >&2 || true
TARGET_LIST=$(IFS=,; echo "${URLS[*]}")
"$BIN/tools/bench/weft-bench" --target="$TARGET_LIST" --trace="$TRACE" --num_requests="$NUM" \
  --concurrency="$CONC" --pairs="$PAIRS" --warmup_requests=4 --progress=lines \
  --json_out="$OUT/results.json" --plot_out="$OUT/results.png" | tee "$OUT/table.txt"
# Step overhead of each Weft target (BENCHMARKS.md): the share of its busy time spent
# outside the workers' forward passes, from the scheduler's counters over the whole run.
for entry in "${METRICS[@]}"; do
  label=${entry%%=*}
  url=${entry#*=}
  curl -sf "$url" >"$OUT/$label-metrics.txt" || continue
  awk -v label="$label" '
    /^weft_worker_forward_seconds_total[ {]/ {fwd=$NF}
    /^weft_step_duration_seconds_sum[ {]/ {step=$NF}
    /^weft_plan_seconds_total[ {]/ {plan=$NF}
    /^weft_steps_total[ {]/ {steps+=$NF}
    /^weft_kv_tokens_sampled_total[ {]/ {tok=$NF}
    /^weft_kv_slots_sampled_total[ {]/ {slots=$NF}
    END {
      if (step + plan > 0) printf "%s: %d steps; time outside the forward pass %.1f%% (forward %.1f s, steps %.1f s, planning/applying %.1f s)", label, steps, 100 * (1 - fwd / (step + plan)), fwd, step, plan
      if (slots > 0) printf "; KV waste %.2f%% (slots held vs tokens stored, sampled every 0.5 s)", 100 * (1 - tok / slots)
      printf "\n"
    }' "$OUT/$label-metrics.txt" | tee -a "$OUT/table.txt"
done
log "results in $OUT"
