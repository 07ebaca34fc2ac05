#!/usr/bin/env bash
# ./run.sh — installs what is missing, builds, starts weft-scheduler and CPU weft-worker(s)
# on the default model, and streams one generation. With --serve it keeps serving.
#
#   ./run.sh [--prompt TEXT] [--chat] [--max_tokens N] [--temperature T] [--seed S]
#            [--ignore_eos] [--print_token_ids]
#            [--serve] [--replicas M] [--tp N] [--model FILE.gguf]
#            [--port P] [--worker_port P] [--metrics_port P] [--http_port P]
#            [--kernels auto|avx512vnni|avx2|reference]
#            [--kv_dtype f16|bf16|int8|f32]
#            [--policy decode-first|prefill-first|static] [--threads N] [--kv_memory_mb MB]
#            [--chat_template FILE.jinja]
#
#   --chat_template the scheduler's chat template instead of the model file's (a model
#                   without one, e.g. Gemma 3 270M's GGUF, serves completions only: start
#                   it with --prompt TEXT, or give it a template for chat)
#   --serve         keep serving after the generation (Ctrl-C stops everything cleanly);
#                   ports default to 50051 (public), 50052 (workers), 9090 (metrics),
#                   8000 (the OpenAI-compatible HTTP API; --http_port -1 turns it off)
#   --replicas M    M data-parallel replicas ...
#   --tp N          ... of N tensor-parallel ranks each (M x N weft-worker processes)
# Without --serve the ports are ephemeral unless given, so it never collides with a server.
# Logs: .weft/run/{scheduler,worker-*}.log. Stdout carries only the generated text; stderr
# has each step's time (install, model, build, start, generate) and a table of them.
# Debian 12 on x86-64 only.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$PWD
source tools/lib.sh
WEFT_PHASE_PROG=run.sh

PROMPT="Write one sentence about the ocean."
CHAT=1
MAX_TOKENS=64
TEMPERATURE=0
SEED=""
EXTRA=()
SERVE=0
REPLICAS=1
TP=1
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
PORT=""
WORKER_PORT=""
METRICS_PORT=""
HTTP_PORT=""
KERNELS=auto
KV_DTYPE=f16
POLICY=decode-first
THREADS=0
KV_MB=512
SCHED_EXTRA=()

usage() { sed -n '2,24p' "$0"; }
die() { echo "run.sh: ERROR: $*" >&2; exit 1; }
need() { [ $# -ge 2 ] || die "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prompt) need "$@"; PROMPT=$2; CHAT=0; shift 2 ;;
    --chat) CHAT=1; shift ;;
    --max_tokens) need "$@"; MAX_TOKENS=$2; shift 2 ;;
    --temperature) need "$@"; TEMPERATURE=$2; shift 2 ;;
    --seed) need "$@"; SEED=$2; shift 2 ;;
    --ignore_eos) EXTRA+=(--ignore_eos); shift ;;
    --print_token_ids) EXTRA+=(--print_token_ids); shift ;;
    --serve) SERVE=1; shift ;;
    --replicas) need "$@"; REPLICAS=$2; shift 2 ;;
    --tp) need "$@"; TP=$2; shift 2 ;;
    --model) need "$@"; MODEL=$2; shift 2 ;;
    --port) need "$@"; PORT=$2; shift 2 ;;
    --worker_port) need "$@"; WORKER_PORT=$2; shift 2 ;;
    --metrics_port) need "$@"; METRICS_PORT=$2; shift 2 ;;
    --http_port) need "$@"; HTTP_PORT=$2; shift 2 ;;
    --kernels) need "$@"; KERNELS=$2; shift 2 ;;
    --kv_dtype) need "$@"; KV_DTYPE=$2; shift 2 ;;
    --policy) need "$@"; POLICY=$2; shift 2 ;;
    --threads) need "$@"; THREADS=$2; shift 2 ;;
    --kv_memory_mb) need "$@"; KV_MB=$2; shift 2 ;;
    --chat_template) need "$@"; SCHED_EXTRA+=(--chat_template="$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown flag $1" ;;
  esac
done
for v in REPLICAS TP MAX_TOKENS KV_MB; do
  [[ ${!v} =~ ^[0-9]+$ ]] && [ "${!v}" -ge 1 ] || die "--$(echo $v | tr A-Z a-z) must be a positive integer"
done
if [ "$SERVE" = 1 ]; then
  PORT=${PORT:-50051}; WORKER_PORT=${WORKER_PORT:-50052}; METRICS_PORT=${METRICS_PORT:-9090}
  HTTP_PORT=${HTTP_PORT:-8000}
else
  PORT=${PORT:-0}; WORKER_PORT=${WORKER_PORT:-0}; METRICS_PORT=${METRICS_PORT:-0}
  HTTP_PORT=${HTTP_PORT:--1}
fi

log() { echo "run.sh: $*" >&2; }
weft_check_platform run.sh

weft_phase install tools/bootstrap.sh --no-model >&2 || die "installing packages failed (see above)"
weft_phase model tools/bootstrap.sh --no-packages >&2 || die "fetching the default model failed (see above)"
[ -f "$MODEL" ] || die "model file not found: $MODEL"

build() {
  log "building with Bazel (about 10 minutes on 2 cores the first time; seconds after that)"
  weft_bazel "run.sh: build" bazel build "${WEFT_BAZEL_BUILD_FLAGS[@]}" \
    //scheduler/service:weft-scheduler //worker/service:weft-worker //tools/cli:weft >&2
}
weft_phase build build || die "build failed"
BIN=$(bazel info bazel-bin 2>/dev/null)
SCHED="$BIN/scheduler/service/weft-scheduler"
WORKER="$BIN/worker/service/weft-worker"
CLI="$BIN/tools/cli/weft"

RUN="$ROOT/.weft/run"
mkdir -p "$RUN"
rm -f "$RUN"/*.log "$RUN/ports.json"
PIDS=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ ${#PIDS[@]} -gt 0 ]; then
    log "stopping ${#PIDS[@]} processes"
    kill -TERM "${PIDS[@]}" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "${PIDS[@]}" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "${PIDS[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

weft_phase_begin start
"$SCHED" --model="$MODEL" --host=127.0.0.1 --port="$PORT" --worker_port="$WORKER_PORT" \
  --metrics_port="$METRICS_PORT" --http_port="$HTTP_PORT" --policy="$POLICY" --ports_file="$RUN/ports.json" \
  "${SCHED_EXTRA[@]}" >"$RUN/scheduler.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 300); do
  [ -f "$RUN/ports.json" ] && break
  kill -0 "${PIDS[0]}" 2>/dev/null || { tail -n 20 "$RUN/scheduler.log" >&2; die "weft-scheduler exited"; }
  sleep 0.1
done
[ -f "$RUN/ports.json" ] || die "weft-scheduler did not start in 30 s (see $RUN/scheduler.log)"
read -r PORT WORKER_PORT METRICS_PORT HTTP_PORT < <(/usr/bin/python3 -c \
  'import json,sys; d=json.load(open(sys.argv[1])); print(d["port"], d["worker_port"], d["metrics_port"], d.get("http_port", -1))' \
  "$RUN/ports.json")

CORES=$(nproc)
if [ "$THREADS" = 0 ]; then
  THREADS=$(( CORES / (REPLICAS * TP) ))
  [ "$THREADS" -ge 1 ] || THREADS=1
fi
for r in $(seq 0 $((REPLICAS - 1))); do
  for k in $(seq 0 $((TP - 1))); do
    "$WORKER" --scheduler="127.0.0.1:$WORKER_PORT" --model="$MODEL" --replica="r$r" \
      --rank="$k" --world_size="$TP" --threads="$THREADS" --kernels="$KERNELS" --kv_dtype="$KV_DTYPE" \
      --kv_memory_bytes=$((KV_MB * 1024 * 1024 / TP)) >"$RUN/worker-r$r-$k.log" 2>&1 &
    PIDS+=($!)
  done
done
log "scheduler on 127.0.0.1:$PORT (workers: $WORKER_PORT, metrics: http://127.0.0.1:$METRICS_PORT/metrics); $REPLICAS replica(s) x TP $TP, $THREADS thread(s) each"

log "waiting for the workers to load the model and attach"
ready=0
for _ in $(seq 1 600); do
  if "$CLI" health --server="127.0.0.1:$PORT" >/dev/null 2>&1; then ready=1; break; fi
  for p in "${PIDS[@]}"; do
    if ! kill -0 "$p" 2>/dev/null; then
      tail -n 20 "$RUN"/*.log >&2
      die "a Weft process exited during start-up (logs above, all in $RUN)"
    fi
  done
  sleep 0.2
done
[ "$ready" = 1 ] || { tail -n 20 "$RUN"/*.log >&2; die "not serving after 120 s (logs in $RUN)"; }
weft_phase_end

GEN=(--server="127.0.0.1:$PORT" --prompt="$PROMPT" --max_tokens="$MAX_TOKENS" --temperature="$TEMPERATURE")
[ "$CHAT" = 1 ] && GEN+=(--chat)
[ -n "$SEED" ] && GEN+=(--seed="$SEED")
GEN+=("${EXTRA[@]}")
weft_phase_begin generate
log "generating (prompt: \"$PROMPT\")"
"$CLI" generate "${GEN[@]}"
echo
weft_phase_end
weft_phase_table

if [ "$SERVE" = 1 ]; then
  log "serving weft.v1.Generation on 127.0.0.1:$PORT; try:"
  log "  $CLI generate --server=127.0.0.1:$PORT --prompt='Hello' --max_tokens=32"
  if [ "$HTTP_PORT" -gt 0 ]; then
    log "OpenAI-compatible HTTP API on http://127.0.0.1:$HTTP_PORT/v1; try:"
    log "  curl -s http://127.0.0.1:$HTTP_PORT/v1/completions -d '{\"prompt\": \"Hello\", \"max_tokens\": 32}'"
  fi
  log "Ctrl-C to stop"
  wait "${PIDS[0]}"
fi
