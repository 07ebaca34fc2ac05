#!/bin/bash
# tools/gpu/ab.sh — the GPU A/B of the unmeasured CUDA choices, in about 5-6 minutes of one
# GPU machine (see tools/gpu/README.md for the pack and the device calls):
#   tests  every packed *_test binary (the gpu-tagged tests), AB_TEST_P (4) at a time, each
#          within AB_TEST_S (150) s: exit status, passed/skipped counts, failed names
#   attn   paged_attention_benchmark's decode rows: pipelined (default) vs grouped vs split_v1,
#          GB/s and the share of the card's copy roofline (measured here with torch if present)
#   qgemm  quant_gemm_benchmark on the default model's shapes (BM_Linear/0..4): cuBLAS bf16
#          vs the fused QuantGemm per m
#   serve  one scheduler+worker pair per variant on the one GPU, each worker with the same
#          fixed KV budget (--kv_memory_bytes), driven by weft-bench with one --target per
#          pair (interleaved, --pairs), at c=1 and at c=64,256; each worker's graph-step
#          counters; the greedy token ids of one fixed prompt from every variant, before and
#          after the load, compared to the baseline's.
# Variants (AB_VARIANTS, default all): base | mixed (--graph_mixed_steps) |
#   grouped (WEFT_CUDA_KERNELS=decode=grouped) | qgemm64 (--quant_gemm_max_rows=64) |
#   split_v1 (WEFT_CUDA_KERNELS=decode=split_v1; not in the default set) | old (the defaults
#   before the first GPU A/B: decode=pipelined, no mixed-step graphs) | nomixed
#   (--graph_mixed_steps=false) | pipelined (WEFT_CUDA_KERNELS=decode=pipelined) | g2048
#   (--max_graph_tokens=2048) | b512 (the scheduler's --max_num_batched_tokens=512) | t4096
#   (4096-token steps: the scheduler's budget and the worker's piecewise graphs) | normgemv
#   (WEFT_CUDA_KERNELS=norm_gemv=1: a layer's norms folded into the decode GEMVs) | pdl
#   (WEFT_CUDA_KERNELS=pdl=1: programmatic dependent launch) | normpdl (both) | ropegemv
#   (rope_gemv=1: RoPE + KV write in the qkv GEMV) | folds (norm_gemv, rope_gemv and pdl).
#   The first is the
#   reference of the greedy comparison and of weft-bench's ratios (first/this).
#
# On the GPU machine, from the checkout's root, in three calls (each call's tree < 64 MiB;
# .gpu/ from ../shared/gpu/pack.sh then tools/gpu/split.sh):
#   AB_PARTS=stage bash tools/gpu/ab.sh          carrying .gpu/{env.sh,serve.1} (kept in /tmp)
#   AB_PARTS=serve bash tools/gpu/ab.sh          carrying .gpu/{env.sh,serve.2,serve.sums}, at once
#   AB_PARTS="tests attn qgemm" bash tools/gpu/ab.sh   carrying .gpu/{env.sh,kernels.tar.xz}
# Here (no GPU): the same orchestration with --backend=null|cpu workers, binaries from bazel-bin:
#   AB_BACKEND=null AB_PARTS=serve bash tools/gpu/ab.sh
# Knobs: AB_PARTS, AB_VARIANTS, AB_BACKEND (cuda|cpu|null), AB_KV_BYTES (per worker, default
#   8 GiB on cuda, 256 MiB otherwise), AB_N1 (requests at c=1, 24), AB_N (requests at
#   c=64,256, 512), AB_C (64,256), AB_PAIRS (3), AB_PORT_BASE (29100), AB_UP_S (120), AB_C1_S (120) and AB_LOAD_S (300)
#   (the two weft-bench runs' limits), AB_TEST_P, AB_TEST_S,
#   AB_BIN (binaries), AB_MODEL (GGUF), OUT (default /tmp/weft-gpu/out or /tmp/weft-ab/out).
# Output: $OUT/summary.tsv — one line per figure: card, variant, figure, value, unit — and
# $OUT/ab-logs.tar.gz (every log). Exit status: 0; 3 when the greedy ids differ, a pair never came up or a
# weft-bench run did not exit 0;
# 4 when a part could not run at all.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd); cd "$ROOT" || exit 4
BACKEND=${AB_BACKEND:-cuda}
PARTS=${AB_PARTS:-attn qgemm serve}
VARIANTS=${AB_VARIANTS:-base mixed grouped qgemm64}
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
FIG="$PY $ROOT/tools/gpu/ab_figures.py"
status=0
if [ "$BACKEND" = cuda ]; then
  # shellcheck source=/dev/null
  . "$ROOT/.gpu/env.sh" || { echo "ab: no .gpu/env.sh (run ../shared/gpu/pack.sh here and carry .gpu/)"; exit 4; }
  # tools/gpu/split.sh's parts: serve.1 waits in $W for the next call; serve.2 with serve.sums
  # completes the serving binaries ($W/s) and the model; kernels.tar.xz holds the tests and
  # the kernel benchmarks ($W/k).
  SV=$W/s; K=$W/k
  if [ -f "$G/serve.1" ]; then cp "$G/serve.1" "$W/serve.1" && echo "ab: kept serve.1 in $W for the next call"; fi
  if [ -f "$G/kernels.tar.xz" ]; then rm -rf "$K"; mkdir -p "$K"; tar xJf "$G/kernels.tar.xz" -C "$K" || exit 4; fi
  if [ -f "$G/serve.2" ]; then
    read -r psize psha msha < "$G/serve.sums" || { echo "ab: no .gpu/serve.sums carried"; exit 4; }
    [ -f "$W/serve.1" ] || { echo "ab: no $W/serve.1: the machine went cold after call 1 (carry serve.1 again)"; exit 4; }
    cat "$W/serve.1" "$G/serve.2" > "$W/serve.blob"
    head -c "$psize" "$W/serve.blob" > "$W/serve.tar.xz"; tail -c +$((psize + 1)) "$W/serve.blob" > "$W/model.gguf"
    rm -f "$W/serve.blob"
    if [ "$(sha256sum "$W/serve.tar.xz" | cut -d' ' -f1)" != "$psha" ] || [ "$(sha256sum "$W/model.gguf" | cut -d' ' -f1)" != "$msha" ]; then
      echo "ab: serve.1 + serve.2 do not match serve.sums (parts from different split.sh runs?)"; rm -f "$W/model.gguf"; exit 4
    fi
    rm -rf "$SV"; mkdir -p "$SV"; tar xJf "$W/serve.tar.xz" -C "$SV" || exit 4
  fi
  export LD_LIBRARY_PATH=$SV/lib:$SV/syslib:$K/lib:$K/syslib:$LD_LIBRARY_PATH
  BIN=${AB_BIN:-$SV/bin}; KBIN=${AB_BIN:-$K/bin}; OUT=${OUT:-$W/out}; MODEL=${AB_MODEL:-$W/model.gguf}
  KV=${AB_KV_BYTES:-8589934592}
  CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '_')
else
  BIN=${AB_BIN:-$ROOT/bazel-bin}; KBIN=$BIN; OUT=${OUT:-/tmp/weft-ab/out}; MODEL=${AB_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
  KV=${AB_KV_BYTES:-268435456}; CARD="cpu-$BACKEND"
fi
CARD=${CARD:-unknown_gpu}
cleanup() {  # every process this script started (timeout leads a group of its own), even on failure
  [ ${#pids[@]} -gt 0 ] || return 0
  local p sig alive=0
  # The process itself too: one started a moment ago may not have become `timeout` (and
  # a group) yet, and would start its server after a group-only kill missed it.
  for sig in TERM KILL; do  # TERM, up to 10 s for the groups to go, then KILL and up to 10 s more
    for p in "${pids[@]}"; do kill -"$sig" -- "-$p" 2>/dev/null; kill -"$sig" "$p" 2>/dev/null; done
    for _ in $(seq 20); do
      alive=0
      for p in "${pids[@]}"; do { kill -0 -- "-$p" || kill -0 "$p"; } 2>/dev/null && alive=1; done
      [ "$alive" = 0 ] && break; sleep 0.5
    done
    [ "$alive" = 0 ] && break
  done
  wait 2>/dev/null; pids=()
}
# $OUT gets summary.tsv and one archive of the logs (a device call returns at most 8 files).
D=$OUT/raw; rm -rf "$D"; mkdir -p "$D"; S=$OUT/summary.tsv; : > "$S"
pids=()
# shellcheck disable=SC2317  # finish runs as the EXIT trap
finish() {
  cleanup
  tar czf "$OUT/ab-logs.tar.gz" -C "$D" . 2>/dev/null
  [ "$BACKEND" != cuda ] || rm -rf "$D"
}
trap finish EXIT; trap 'exit 130' INT TERM
bin() {  # a binary by name: flat in the pack's bin/, or in bazel-bin's tree
  local p; for p in "$BIN/$1" "$KBIN/$1" "$BIN/worker/service/$1" "$BIN/scheduler/service/$1" "$BIN/tools/cli/$1" "$BIN/tools/bench/$1"; do
    [ -x "$p" ] && { echo "$p"; return; }; done; echo "$BIN/$1"; }
fig() { echo -e "$CARD\t$1\t$2\t$3\t$4" >> "$S"; }
note() { echo "ab: $*" | tee -a "$D/ab.log"; }
note "card $CARD backend $BACKEND parts [$PARTS] variants [$VARIANTS] out $OUT"

if [[ " $PARTS " == *" attn "* || " $PARTS " == *" qgemm "* ]] && [ "$BACKEND" = cuda ]; then
  # The roofline the benchmarks divide by: this card's device-to-device copy (as check.sh).
  gbps=$(timeout 60 python3 - <<'PY' 2>/dev/null
import torch
x = torch.empty(2**30, dtype=torch.uint8, device="cuda").random_(); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
s, e = torch.cuda.Event(True), torch.cuda.Event(True); torch.cuda.synchronize(); s.record()
for _ in range(20): y.copy_(x)
e.record(); torch.cuda.synchronize(); t = s.elapsed_time(e) / 20 / 1e3
print(f"{2 * 2**30 / t / 1e9:.0f}")
PY
)
  if [ -n "$gbps" ]; then fig copy roofline_d2d_copy "$gbps" "GB/s(read+write)"; export WEFT_ROOFLINE_GBPS=$gbps
  else note "no torch: roofline% is against WEFT_ROOFLINE_GBPS=${WEFT_ROOFLINE_GBPS:-3000} (the H100's copy)"; fi
fi
# run_bench PART BINARY TIMEOUT_S MIN_TIME FILTER [MISSING_HINT]: one Google Benchmark run
# of the pack's BINARY into $D/PART.{json,txt}, its exit status and figures in the summary.
run_bench() {
  local part=$1 binary=$2 limit=$3 min_time=$4 filter=$5 hint=${6:-}
  if [ ! -x "$(bin "$binary")" ]; then
    note "$part: no $binary under $KBIN$hint"; status=4; return
  fi
  timeout "$limit" "$(bin "$binary")" --benchmark_filter="$filter" \
    --benchmark_min_time="$min_time" --benchmark_out="$D/$part.json" --benchmark_out_format=json \
    > "$D/$part.txt" 2>&1
  local rc=$?
  note "$part rc=$rc"; fig all "${part}_exit_status" "$rc" "status(124 timed out: see $part.txt)"
  [ "$rc" = 0 ] || status=4
  $FIG gbench "$CARD" "$D/$part.json" >> "$S" 2>> "$D/ab.log" || note "$part: no figures (the rows are in $part.txt)"
}
if [[ " $PARTS " == *" tests "* ]]; then
  # Every packed *_test binary (the gpu-tagged tests), AB_TEST_P at a time on the one card
  # (they assert results, not speed), each within AB_TEST_S seconds.
  tests=$(ls "$KBIN"/*_test 2>/dev/null)
  [ -n "$tests" ] || { note "tests: no *_test under $KBIN"; status=4; }
  # shellcheck disable=SC2016  # expanded by the inner bash
  printf '%s\n' $tests | xargs -P "${AB_TEST_P:-4}" -I{} bash -c \
    't={}; n=$(basename "$t"); timeout '"${AB_TEST_S:-150}"' "$t" --gtest_color=no > "'"$D"'/test-$n.txt" 2>&1; echo $? > "'"$D"'/test-$n.rc"'
  for t in $tests; do
    n=$(basename "$t"); rc=$(cat "$D/test-$n.rc" 2>/dev/null || echo none)
    passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$D/test-$n.txt" | grep -oE '[0-9]+$' || echo 0)
    skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$D/test-$n.txt" | grep -oE '[0-9]+' || echo 0)
    failed=$(grep -E '^\[  FAILED  \] [A-Za-z]' "$D/test-$n.txt" | sed 's/^\[  FAILED  \] //; s/ .*//' | sort -u | tr '\n' ',')
    fig all "test/$n" "$rc" "exit(passed=${passed:-0},skipped=${skipped:-0},failed=${failed:-none})"
    [ "$rc" = 0 ] || status=3
  done
fi
if [[ " $PARTS " == *" attn "* ]]; then
  run_bench attn paged_attention_benchmark 150 0.2 '^BM_PagedDecodeAttention/'
fi
if [[ " $PARTS " == *" qgemm "* ]]; then
  # BM_Linear/<shape>/<m>/<kernel>: shapes 0-4 are the default model's (smollm_*); the
  # filter matches the name (the shape's name is only the label). min_time 0.02 s of GPU
  # time: a row's CPU time per iteration is ~20x its GPU time (H200, 2026-11-28: at 0.1
  # s, ~3 s a row, and 33 of the 90 rows ran inside the 120 s).
  run_bench qgemm quant_gemm_benchmark 120 0.02 '^BM_Linear/[0-4]/' " (pack with GPU_EXTRA_TARGETS)"
fi

[[ " $PARTS " == *" serve "* ]] || { echo "==== summary"; cat "$S"; exit $status; }
[ -f "$MODEL" ] || { note "serve: no model $MODEL (the call before carries serve.1, this one serve.2 and serve.sums; tools/gpu/README.md)"; exit 4; }

port() { echo $((${AB_PORT_BASE:-29100} + 10 * $1 + $2)); }  # variant index, 1 public / 2 worker / 3-4 metrics
i=0; targets=""
for v in $VARIANTS; do
  env=(); flags=(); sflags=()
  case $v in
    base) ;;
    mixed) flags=(--graph_mixed_steps) ;;
    grouped) env=(WEFT_CUDA_KERNELS=decode=grouped) ;;
    qgemm64) flags=(--quant_gemm_max_rows=64) ;;
    split_v1) env=(WEFT_CUDA_KERNELS=decode=split_v1) ;;
    old) env=(WEFT_CUDA_KERNELS=decode=pipelined,mixed_graphs=0) ;;
    nomixed) flags=(--graph_mixed_steps=false) ;;
    g2048) flags=(--max_graph_tokens=2048) ;;
    b512) sflags=(--max_num_batched_tokens=512) ;;
    t4096) sflags=(--max_num_batched_tokens=4096); flags=(--max_graph_tokens=4096) ;;
    pipelined) env=(WEFT_CUDA_KERNELS=decode=pipelined) ;;
    normgemv) env=(WEFT_CUDA_KERNELS=norm_gemv=1) ;;
    pdl) env=(WEFT_CUDA_KERNELS=pdl=1) ;;
    normpdl) env=(WEFT_CUDA_KERNELS=norm_gemv=1,pdl=1) ;;
    ropegemv) env=(WEFT_CUDA_KERNELS=rope_gemv=1) ;;
    folds) env=(WEFT_CUDA_KERNELS=norm_gemv=1,rope_gemv=1,pdl=1) ;;
    *) note "unknown variant $v"; exit 2 ;;
  esac
  timeout 900 "$(bin weft-scheduler)" --model="$MODEL" --host=127.0.0.1 --port="$(port $i 1)" \
    --worker_port="$(port $i 2)" --metrics_port="$(port $i 3)" "${sflags[@]}" > "$D/scheduler-$v.log" 2>&1 & pids+=($!)
  env "${env[@]}" timeout 900 "$(bin weft-worker)" --scheduler=127.0.0.1:"$(port $i 2)" --model="$MODEL" \
    --backend="$BACKEND" --replica="$v" --kv_memory_bytes="$KV" --metrics_port="$(port $i 4)" \
    --give_up_after_s=60 "${flags[@]}" > "$D/worker-$v.log" 2>&1 & pids+=($!)
  echo "${pids[@]}" > "$D/pids.txt"  # process groups, for a caller to check they are gone
  targets="$targets${targets:+,}$v=grpc://127.0.0.1:$(port $i 1)"; i=$((i + 1))
done
note "started: $targets (KV ${KV} bytes per worker)"
i=0; up=1
for v in $VARIANTS; do  # all load at once; each pair must answer health within AB_UP_S (120 s)
  ok=0; for _ in $(seq $((2 * ${AB_UP_S:-120}))); do
    timeout 5 "$(bin weft)" health --server=127.0.0.1:"$(port $i 1)" > /dev/null 2>&1 && { ok=1; break; }
    kill -0 "${pids[$((2 * i + 1))]}" 2>/dev/null || break  # its worker exited
    sleep 0.5; done
  fig "$v" serve_up "$ok" bool
  [ $ok = 1 ] || { note "serve: $v never became healthy"; tail -5 "$D/worker-$v.log" | tee -a "$D/ab.log"; up=0; }
  i=$((i + 1))
done
[ $up = 1 ] || { status=3; echo "==== summary"; cat "$S"; exit $status; }

PROMPT="Write one sentence about the ocean."
greedy() {  # token ids of one fixed greedy chat request to variant index $1
  timeout 60 "$(bin weft)" generate --server=127.0.0.1:"$(port "$1" 1)" --chat --prompt="$PROMPT" \
    --max_tokens=48 --temperature=0 --print_token_ids 2>> "$D/greedy.err" | tr '\n' ' '; }
declare -A first  # each variant's ids before the load
compare_greedy() {  # $1: before|after — against base's ids, and after the load against its own
  local i=0 ref="" ids
  for v in $VARIANTS; do
    ids=$(greedy $i); echo "$1 $v: $ids" >> "$D/greedy.txt"
    [ $i = 0 ] && ref=$ids
    if [ "$1" = before ]; then first[$v]=$ids
    elif [ -n "$ids" ] && [ "$ids" = "${first[$v]}" ]; then fig "$v" greedy_after_identical_to_own_before 1 bool
    else fig "$v" greedy_after_identical_to_own_before 0 "bool(DIFFERS)"; status=3; fi
    if [ -z "$ids" ]; then fig "$v" "greedy_$1" 0 "tokens(none:FAILED)"; status=3
    elif [ "$ids" = "$ref" ]; then fig "$v" "greedy_$1_identical_to_${VARIANTS%% *}" 1 "bool"
    else fig "$v" "greedy_$1_identical_to_${VARIANTS%% *}" 0 "bool(DIFFERS)"; status=3; fi
    i=$((i + 1))
  done
}
timeout 60 "$(bin weft)" generate --server=127.0.0.1:"$(port 0 1)" --chat --prompt="$PROMPT" --max_tokens=48 \
  --temperature=0 > "$D/greedy-text.txt" 2>&1
compare_greedy before

bench() {  # $1 name, $2 concurrency levels, $3 requests per run, $4 seconds at most
  timeout "$4" "$(bin weft-bench)" --target="$targets" --trace=sharegpt-like \
    --num_requests="$3" --concurrency="$2" --pairs="${AB_PAIRS:-3}" --warmup_requests=8 --progress=off \
    --json_out="$D/bench-$1.json" > "$D/bench-$1.txt" 2> "$D/bench-$1.err"
  local rc=$?; note "bench $1 (c=$2, n=$3) rc=$rc"
  fig all "serve/bench_$1_exit_status" "$rc" "status(0 ok, 3 failed requests, 124 timed out)"
  [ "$rc" = 0 ] || status=3
  [ -f "$D/bench-$1.json" ] && $FIG bench "$CARD" "$D/bench-$1.json" >> "$S"
}
# Each scheduler's CPU (all threads, user + system) and generated tokens over the load
# part, for issue 31 item 7's figure under a real worker: the scheduler is the child of
# the `timeout` that leads pids[2i].
scrape() {  # the /metrics text on local port $1 (empty when it does not answer in 10 s)
  timeout 10 "$PY" -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$1/metrics').read().decode())" 2>/dev/null
}
sched_snapshot() {  # prints "<cpu ticks> <generated tokens>" of variant index $1
  local child ticks tokens
  child=$(pgrep -P "${pids[$((2 * $1))]}" | head -1)
  ticks=$(awk '{print $14 + $15}' "/proc/$child/stat" 2>/dev/null || echo 0)
  tokens=$(scrape "$(port "$1" 3)" | awk '/^weft_generated_tokens_total/ {g += $NF} END {print g + 0}')
  echo "$ticks $tokens"
}
declare -A sched0
bench c1 1 "${AB_N1:-24}" "${AB_C1_S:-120}"
i=0; for v in $VARIANTS; do sched0[$v]=$(sched_snapshot $i); i=$((i + 1)); done
bench load "${AB_C:-64,256}" "${AB_N:-512}" "${AB_LOAD_S:-300}"
i=0; hz=$(getconf CLK_TCK)
for v in $VARIANTS; do
  read -r t0 g0 <<< "${sched0[$v]}"; read -r t1 g1 <<< "$(sched_snapshot $i)"
  note "scheduler $v: CPU ticks $t0 -> $t1, generated tokens $g0 -> $g1"
  us=$(awk -v t="$((t1 - t0))" -v g0="$g0" -v g1="$g1" -v hz="$hz" \
    'BEGIN { g = g1 - g0; if (g > 0) printf "%.2f", t * 1e6 / hz / g; else print "nan" }')
  fig "$v" serve/load/sched_cpu_us_per_token "$us" "us(scheduler user+system CPU / generated tokens, load part)"
  i=$((i + 1))
done
compare_greedy after

i=0
for v in $VARIANTS; do
  scrape "$(port $i 4)" > "$D/metrics-worker-$v.txt"
  $FIG metrics "$CARD" "$v" "$D/metrics-worker-$v.txt" >> "$S"
  scrape "$(port $i 3)" > "$D/metrics-scheduler-$v.txt"
  $FIG schedmetrics "$CARD" "$v" "$D/metrics-scheduler-$v.txt" >> "$S"
  i=$((i + 1))
done
cleanup
echo "==== summary ($S)"; cat "$S"
exit $status
