#!/usr/bin/env bash
# ./test.sh --full part (issue 26): the default model re-quantized by llama.cpp's
# llama-quantize to Q4_K_M, Q6_K and Q5_0, each file checked against the sha256 in
# tests/testdata/requant_ref.json, then Weft against llama.cpp's committed outputs on
# them (//worker/model:requant_accuracy_test: greedy continuations and perplexity).
#
#   tools/quant/full.sh        # builds llama-quantize once (cached), re-quantizes once
#
# Files: ~/.cache/weft/models/requant/ (WEFT_REQUANT_DIR overrides). Exit status 0 when
# the files check and the test passes.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
DIR=${WEFT_REQUANT_DIR:-$HOME/.cache/weft/models/requant}
SRC=${WEFT_MODEL_DIR:-$ROOT/models}/SmolLM2-135M-Instruct.Q4_1.gguf
REF=tests/testdata/requant_ref.json
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
log() { echo "quant/full: $*" >&2; }
[ -f "$SRC" ] || { log "missing $SRC (run tools/bootstrap.sh)"; exit 1; }
mkdir -p "$DIR"
# type, file name and sha256 of each re-quantized model, from the reference.
entries=$("$PY" -c '
import json, sys
for m in json.load(open(sys.argv[1]))["models"]:
    print(m["type"], m["file"], m["sha256"])' "$REF")
QUANTIZE=
while read -r type file sha; do
  out=$DIR/$file
  if [ ! -f "$out" ] || ! echo "$sha  $out" | sha256sum -c --quiet - 2>/dev/null; then
    [ -n "$QUANTIZE" ] || QUANTIZE=$(tools/quant/build_llama_quantize.sh)
    log "re-quantizing to $type"
    "$QUANTIZE" --allow-requantize "$SRC" "$out.tmp" "$type" 2 >"$DIR/$type.log" 2>&1 ||
      { log "llama-quantize failed, see $DIR/$type.log"; exit 1; }
    mv "$out.tmp" "$out"
  fi
  echo "$sha  $out" | sha256sum -c --quiet - ||
    { log "$out does not have the sha256 of $REF ($sha)"; exit 1; }
  log "$file: sha256 ok"
done <<<"$entries"
source tools/lib.sh
BAZEL=(bazel "${WEFT_BAZEL_STARTUP[@]}")
"${BAZEL[@]}" test "${WEFT_BAZEL_BUILD_FLAGS[@]}" --nocache_test_results --test_output=all --test_env=WEFT_REQUANT_DIR="$DIR" \
  //worker/model:requant_accuracy_test
