#!/usr/bin/env bash
# tools/bench/structured_ab.sh — structured output's serving cost (issue 33; a benchmark,
# not a test): one weft-scheduler + one CPU weft-worker on loopback, driven by weft-bench
# with the same seeded trace, alternating A (unconstrained only) and B (--constrained_fraction
# of the requests under weft-bench's default JSON schema), PAIRS times: A B A B ...
# Prints each run's output tokens/s and, at the end, the median of the B/A ratios and
# the scheduler's mask time per constrained token (weft_grammar_mask_seconds_total /
# weft_grammar_masks_total).
#   [TRACE=short] tools/bench/structured_ab.sh [PAIRS=5] [NUM_REQUESTS=32] [CONCURRENCY=16] [FRACTION=0.5]
set -euo pipefail
cd "$(dirname "$0")/../.."
PAIRS=${1:-5}
NUM=${2:-32}
CONC=${3:-16}
FRACTION=${4:-0.5}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=$(mktemp -d /tmp/weft-structured-ab.XXXX)
BIN=bazel-bin
"$BIN/scheduler/service/weft-scheduler" --model="$MODEL" --host=127.0.0.1 --port=0 --worker_port=0 \
  --metrics_port=0 --ports_file="$OUT/ports" >"$OUT/scheduler.log" 2>&1 &
SCHED=$!
trap 'kill $SCHED ${WORKER:-} 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$OUT/ports" ] && break; sleep 0.2; done
port() { grep "^$1" "$OUT/ports" | head -1 | awk '{print $2}' | tr -d ':= '; }
cat "$OUT/ports" >&2
PORT=$(python3 -c "import json; print(json.load(open('$OUT/ports'))['port'])")
WPORT=$(python3 -c "import json; print(json.load(open('$OUT/ports'))['worker_port'])")
MPORT=$(python3 -c "import json; print(json.load(open('$OUT/ports'))['metrics_port'])")
"$BIN/worker/service/weft-worker" --model="$MODEL" --scheduler="127.0.0.1:$WPORT" --num_kv_blocks=2048 \
  --threads="$(nproc)" --metrics_port=-1 >"$OUT/worker.log" 2>&1 &
WORKER=$!
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$MPORT/metrics" | grep -q '^weft_replicas[{ ].* 1$' && break
  sleep 0.5
done
run() {  # label fraction
  "$BIN/tools/bench/weft-bench" --target="grpc://127.0.0.1:$PORT" --trace="${TRACE:-sharegpt-like}" \
    --num_requests="$NUM" --concurrency="$CONC" --constrained_fraction="$2" --progress=off \
    --json_out="$OUT/$1.json" >"$OUT/$1.txt" 2>&1
  python3 -c "import json,sys; d=json.load(open('$OUT/$1.json')); print(json.dumps(d))" |
    grep -o '"output_tok_s": [0-9.]*' | head -1 | awk '{print $2}'
}
ratios=()
for i in $(seq "$PAIRS"); do
  a=$(run "a$i" 0)
  b=$(run "b$i" "$FRACTION")
  echo "pair $i: unconstrained $a out tok/s, $FRACTION constrained $b out tok/s"
  ratios+=("$(python3 -c "print($b / $a)")")
done
python3 - "${ratios[@]}" <<'PY'
import statistics, sys
r = [float(x) for x in sys.argv[1:]]
print("median B/A throughput ratio: %.3f over %d pairs (%s)" % (statistics.median(r), len(r),
      ", ".join("%.3f" % x for x in r)))
PY
m=$(curl -sf "http://127.0.0.1:$MPORT/metrics")
masks=$(echo "$m" | grep '^weft_grammar_masks_total' | awk '{print $2}')
secs=$(echo "$m" | grep '^weft_grammar_mask_seconds_total' | awk '{print $2}')
python3 -c "print('scheduler mask time: %.1f us per constrained token over %d masks' % (1e6*$secs/$masks, $masks))"
echo "logs and JSON: $OUT"
