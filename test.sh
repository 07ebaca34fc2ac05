#!/usr/bin/env bash
# ./test.sh — installs what is missing and runs Weft's whole test suite.
#
#   ./test.sh            what CI runs: default build + all tests; the --config=cuda build
#                        (when nvcc exists); ASan/UBSan on parser, tokenizer, validation,
#                        block-pool and planner tests; TSan on the scheduler core and the
#                        threaded code; clang-14's thread-safety analysis over every
#                        package; each fuzzer 30 s on its corpus.
#   ./test.sh --quick    default build + tests only (for iterating)
#   ./test.sh --full     also the soak and long benchmarks (tools/soak, tools/bench)
#
# Ends with one line: "N passed, N failed, N skipped", counting gtest cases from Bazel's
# test.xml files (Bazel itself reports a skipped gtest as passed), plus one entry per
# fuzzer run and per extra build (CUDA). Exit status 0 only when nothing failed.
set -uo pipefail

cd "$(dirname "$0")"
ROOT=$PWD
MODE=ci
for arg in "$@"; do
  case "$arg" in
    --quick) MODE=quick ;;
    --full) MODE=full ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown flag $arg" >&2; exit 2 ;;
  esac
done

FUZZ_SECONDS=${WEFT_FUZZ_SECONDS:-30}
RESULTS=$(mktemp -d)
trap 'rm -rf "$RESULTS"' EXIT
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

step() { echo "=== test.sh: $* ===" >&2; }
extra_result() {  # name passed|failed|skipped message
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$RESULTS/extra.tsv"
}

step "bootstrap"
if ! tools/bootstrap.sh; then
  echo "test.sh: bootstrap failed; see the message above" >&2
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
# Tests find models/ through the runfiles symlink of tools/models.txt (no env needed).

BAZEL=(bazel)
if [ -n "${CI:-}" ]; then
  # No server idling for hours after CI; results never cached across runs.
  BAZEL=(bazel --batch)
fi
CACHE_FLAGS=()
if [ -n "${CI:-}" ] || [ "$MODE" = full ]; then
  CACHE_FLAGS=(--nocache_test_results)
fi

# run_tests <name> <config flags...> -- <targets...>: runs bazel test and records where
# each target's test.xml lives.
run_tests() {
  local name=$1
  shift
  local flags=()
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  local targets=("$@")
  local query="tests(set(${targets[*]}))"
  if [[ " ${flags[*]} " != *" --config=cuda "* ]]; then
    # GPU tests exist only in --config=cuda builds (elsewhere Bazel skips them as
    # incompatible and writes no test.xml): not counted here.
    query="$query except attr(tags, \"gpu\", $query)"
  fi
  local labels
  labels=$("${BAZEL[@]}" query --noshow_progress "$query" 2>/dev/null | grep -v '^$' || true)
  "${BAZEL[@]}" test "${flags[@]}" "${CACHE_FLAGS[@]}" --test_tag_filters=-manual \
    --build_tests_only --keep_going -- "${targets[@]}"
  local rc=$?
  local logs
  logs=$("${BAZEL[@]}" info "${flags[@]}" bazel-testlogs 2>/dev/null)
  for l in $labels; do
    local rel=${l#//}
    rel=${rel/://}
    printf '%s\t%s\t%s\n' "$name" "$l" "$logs/$rel/test.xml" >>"$RESULTS/xml.tsv"
  done
  return $rc
}

step "default build and all tests"
run_tests default -- //...

if [ "$MODE" != quick ]; then
  if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    step "CUDA build (--config=cuda)"
    if "${BAZEL[@]}" build --config=cuda --keep_going -- //...; then
      echo "CUDA: built"
      extra_result cuda_build passed "CUDA: built"
      run_tests cuda --config=cuda -- $("${BAZEL[@]}" query --noshow_progress \
        'attr(tags, "gpu", tests(//...))' 2>/dev/null | tr '\n' ' ')
    else
      echo "CUDA: FAILED"
      extra_result cuda_build failed "CUDA build failed"
    fi
  else
    echo "CUDA: skipped (no nvcc)"
    extra_result cuda_build skipped "CUDA: skipped (no nvcc)"
  fi

  step "ASan/UBSan: parser, tokenizer, validation, block pool, planner"
  ASAN_TARGETS=$("${BAZEL[@]}" query --noshow_progress 'attr(tags, "asan", tests(//...))' 2>/dev/null | tr '\n' ' ')
  if [ -n "$ASAN_TARGETS" ]; then
    run_tests asan --config=asan -- $ASAN_TARGETS
  fi

  step "TSan: scheduler core, engine inbox and both write queues (fake transports), thread pool, shm communicator"
  TSAN_TARGETS=$("${BAZEL[@]}" query --noshow_progress 'attr(tags, "tsan", tests(//...))' 2>/dev/null | tr '\n' ' ')
  if [ -n "$TSAN_TARGETS" ]; then
    run_tests tsan --config=tsan -- $TSAN_TARGETS
  fi

  step "clang-14 thread-safety analysis (--config=clang_tsa: -Wthread-safety -Werror)"
  # Every package but the convenience symlinks (bazel-*), in its own output base: the
  # compiler switch would otherwise discard the default build's analysis cache.
  TSA_PACKAGES=$(for d in */; do
    d=${d%/}
    case "$d" in bazel-*) continue ;; esac
    [ -n "$(find "$d" -maxdepth 4 -name BUILD.bazel -print -quit)" ] && echo "//$d/..."
  done)
  if "${BAZEL[@]}" --output_base="${WEFT_TSA_OUTPUT_BASE:-$HOME/.cache/weft/bazel-clang-tsa}" \
      build --config=clang_tsa --symlink_prefix=/ --keep_going -- //:all $TSA_PACKAGES; then
    extra_result clang_thread_safety passed "clang-14 -Wthread-safety -Werror: built"
  else
    extra_result clang_thread_safety failed "clang-14 -Wthread-safety -Werror: see the errors above"
  fi

  step "fuzzers (${FUZZ_SECONDS} s each, clang-14 libFuzzer, ASan+UBSan)"
  tools/run_fuzzers.sh "$FUZZ_SECONDS" "$RESULTS/extra.tsv"
fi

if [ "$MODE" = full ]; then
  step "full: soak and long benchmarks"
  for t in tools/soak/run.sh tools/bench/full.sh; do
    if [ -x "$t" ]; then
      if "$t"; then extra_result "$t" passed ""; else extra_result "$t" failed ""; fi
    fi
  done
fi

[ -n "${CI:-}" ] || true
"$PY" tools/count_tests.py "$RESULTS/xml.tsv" "$RESULTS/extra.tsv"
