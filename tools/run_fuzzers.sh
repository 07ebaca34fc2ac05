#!/usr/bin/env bash
# tools/run_fuzzers.sh SECONDS|auto RESULTS_TSV — builds every libFuzzer target (Bazel
# tag "fuzz") with clang-14 + ASan/UBSan and runs each for SECONDS on its committed corpus
# (tests/fuzz_corpus/<name without _fuzz>/, copied to a scratch dir so the repo is not
# written). "auto": the fuzzers share WEFT_FUZZ_BUDGET_SECONDS (default 120; test.sh passes
# 60 in CI and 600 under --full), at least 10 s each, so the suite's time holds as fuzzers are added.
# WEFT_FUZZ_SEED: libFuzzer's -seed (default 0: a random seed per run; test.sh's CI mode
# passes 1 so that a run explores the same inputs on every machine, as far as its time
# allows). Appends "name<TAB>passed|failed<TAB>message" lines to RESULTS_TSV.
# Fuzz builds use the clang-14 output base (WEFT_FUZZ_OUTPUT_BASE, default
# WEFT_CLANG_OUTPUT_BASE of tools/lib.sh, shared with tools/clang_tsa.sh): switching the C
# compiler in the default one would throw away the default build's cache.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/lib.sh
SECONDS_EACH=${1:-auto}
# Fuzzers that need the real vocabulary (tokenizer_fuzz) read it from here.
export WEFT_MODEL_DIR=${WEFT_MODEL_DIR:-$PWD/models}
OUT=${2:-/dev/stdout}
BASE=${WEFT_FUZZ_OUTPUT_BASE:-$WEFT_CLANG_OUTPUT_BASE}
BAZEL=(bazel "${WEFT_BAZEL_STARTUP[@]}" --output_base="$BASE")
QUERY=(bazel "${WEFT_BAZEL_STARTUP[@]}")

# Query with the default server: a //... pattern in the fuzz output base would wander
# into the default base's convenience symlinks.
targets=$("${QUERY[@]}" query --noshow_progress 'attr(tags, "fuzz", kind(cc_binary, //...))' 2>/dev/null)
if [ -z "$targets" ]; then
  exit 0
fi
if [ "$SECONDS_EACH" = auto ]; then
  SECONDS_EACH=$(( ${WEFT_FUZZ_BUDGET_SECONDS:-120} / $(echo "$targets" | wc -l) ))
  [ "$SECONDS_EACH" -ge 10 ] || SECONDS_EACH=10
fi
# --symlink_prefix=/ keeps bazel-bin & co pointing at the default build.
weft_bazel "run_fuzzers.sh" "${BAZEL[@]}" build "${WEFT_BAZEL_BUILD_FLAGS[@]}" --config=fuzz \
  --symlink_prefix=/ --keep_going -- $targets
build_rc=$?
bin=$("${BAZEL[@]}" info --config=fuzz bazel-bin 2>/dev/null)
ARTIFACTS=${WEFT_FUZZ_ARTIFACTS:-/tmp/weft-fuzz-artifacts}
mkdir -p "$ARTIFACTS"
for t in $targets; do
  rel=${t#//}; pkg=${rel%%:*}; name=${rel##*:}
  if [ "$build_rc" != 0 ] && ! "${BAZEL[@]}" build "${WEFT_BAZEL_BUILD_FLAGS[@]}" --config=fuzz \
      --symlink_prefix=/ -- "$t" >/dev/null 2>&1; then
    printf '%s\tfailed\tfuzz build failed\n' "$t" >>"$OUT"
    continue
  fi
  corpus_src="tests/fuzz_corpus/${name%_fuzz}"
  work=$(mktemp -d)
  [ -d "$corpus_src" ] && cp -r "$corpus_src"/. "$work/" 2>/dev/null
  log=$(mktemp)
  echo "fuzz: $t for ${SECONDS_EACH}s on $corpus_src (seed ${WEFT_FUZZ_SEED:-0})" >&2
  if "$bin/$pkg/$name" -max_total_time="$SECONDS_EACH" -seed="${WEFT_FUZZ_SEED:-0}" \
      -rss_limit_mb=4096 -timeout=25 \
      -print_final_stats=1 -artifact_prefix="$ARTIFACTS/" "$work" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    printf '%s\tpassed\t%s runs\n' "$t" "${runs:-?}" >>"$OUT"
  else
    tail -n 30 "$log" >&2
    printf '%s\tfailed\tcrash or leak (see log above; reproducer in %s)\n' "$t" "$ARTIFACTS" >>"$OUT"
  fi
  rm -rf "$work" "$log"
done
