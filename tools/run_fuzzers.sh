#!/usr/bin/env bash
# tools/run_fuzzers.sh SECONDS RESULTS_TSV — builds every libFuzzer target (Bazel tag
# "fuzz") with clang-14 + ASan/UBSan and runs each for SECONDS on its committed corpus
# (tests/fuzz_corpus/<name without _fuzz>/, copied to a scratch dir so the repo is not
# written). Appends "name<TAB>passed|failed<TAB>message" lines to RESULTS_TSV.
# Fuzz builds use their own Bazel output base: switching the C compiler would otherwise
# throw away the default build's cache.
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-30}
# Fuzzers that need the real vocabulary (tokenizer_fuzz) read it from here.
export WEFT_MODEL_DIR=${WEFT_MODEL_DIR:-$PWD/models}
OUT=${2:-/dev/stdout}
BASE=${WEFT_FUZZ_OUTPUT_BASE:-$HOME/.cache/weft/bazel-fuzz}
BAZEL=(bazel --output_base="$BASE")
QUERY=(bazel)
if [ -n "${CI:-}" ]; then
  BAZEL=(bazel --batch --output_base="$BASE")
  QUERY=(bazel --batch)
fi

# Query with the default server: a //... pattern in the fuzz output base would wander
# into the default base's convenience symlinks.
targets=$("${QUERY[@]}" query --noshow_progress 'attr(tags, "fuzz", kind(cc_binary, //...))' 2>/dev/null)
if [ -z "$targets" ]; then
  exit 0
fi
# --symlink_prefix=/ keeps bazel-bin & co pointing at the default build.
"${BAZEL[@]}" build --config=fuzz --symlink_prefix=/ --keep_going -- $targets
build_rc=$?
bin=$("${BAZEL[@]}" info --config=fuzz bazel-bin 2>/dev/null)
ARTIFACTS=${WEFT_FUZZ_ARTIFACTS:-/tmp/weft-fuzz-artifacts}
mkdir -p "$ARTIFACTS"
for t in $targets; do
  rel=${t#//}; pkg=${rel%%:*}; name=${rel##*:}
  if [ "$build_rc" != 0 ] && ! "${BAZEL[@]}" build --config=fuzz --symlink_prefix=/ -- "$t" >/dev/null 2>&1; then
    printf '%s\tfailed\tfuzz build failed\n' "$t" >>"$OUT"
    continue
  fi
  corpus_src="tests/fuzz_corpus/${name%_fuzz}"
  work=$(mktemp -d)
  [ -d "$corpus_src" ] && cp -r "$corpus_src"/. "$work/" 2>/dev/null
  log=$(mktemp)
  echo "fuzz: $t for ${SECONDS_EACH}s on $corpus_src" >&2
  if "$bin/$pkg/$name" -max_total_time="$SECONDS_EACH" -rss_limit_mb=4096 -timeout=25 \
      -print_final_stats=1 -artifact_prefix="$ARTIFACTS/" "$work" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    printf '%s\tpassed\t%s runs\n' "$t" "${runs:-?}" >>"$OUT"
  else
    tail -n 30 "$log" >&2
    printf '%s\tfailed\tcrash or leak (see log above; reproducer in %s)\n' "$t" "$ARTIFACTS" >>"$OUT"
  fi
  rm -rf "$work" "$log"
done
