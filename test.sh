#!/usr/bin/env bash
# ./test.sh — installs what is missing and runs Weft's whole test suite.
#
#   ./test.sh            what CI runs: default build + all tests; the --config=cuda build
#                        (when nvcc exists, into bazel-cuda-bin) with its gpu/cuda-tagged
#                        tests; ASan/UBSan on parser, tokenizer, validation,
#                        block-pool and planner tests; TSan on the scheduler core and the
#                        threaded code; clang-14's thread-safety analysis over the code
#                        that uses the lock annotations (tools/clang_tsa.sh); each fuzzer
#                        30 s on its corpus; the Kubernetes overlays validated strictly
#                        against their schemas (deploy/k8s/validate.sh).
#   ./test.sh --quick    default build + tests and the thread-safety analysis (for iterating)
#   ./test.sh --full     also the soak and long benchmarks (tools/soak, tools/bench) and
#                        the container images: built daemonless (debootstrap, umoci) and
#                        run chroot'ed (deploy/image/image_test.py; needs root and the
#                        Debian mirror; about 2-3 minutes cold, see deploy/README.md)
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
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
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

# Tags of the tests that need the --config=cuda build: "gpu" (skip without a device) and
# "cuda" (the CUDA-built binaries, no device needed). A regex over the tags list.
CUDA_TAGS='[\[ ](gpu|cuda)[,\]]'

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
    # Tests tagged gpu or cuda exist only in --config=cuda builds (elsewhere Bazel skips
    # them as incompatible and writes no test.xml): not counted here.
    query="$query except attr(tags, \"$CUDA_TAGS\", $query)"
  fi
  local labels
  labels=$("${BAZEL[@]}" query --noshow_progress "$query" 2>/dev/null | grep -v '^$' || true)
  "${BAZEL[@]}" test "${flags[@]}" "${CACHE_FLAGS[@]}" --test_tag_filters=-manual \
    --build_tests_only --keep_going -- "${targets[@]}"
  local rc=$?
  local logs
  logs=$("${BAZEL[@]}" info "${flags[@]}" bazel-testlogs 2>/dev/null)
  # Each run's test.xml files are copied aside: a later run of the same targets in the
  # same output tree (another --test_env) writes over them.
  for l in $labels; do
    local rel=${l#//}
    rel=${rel/://}
    local xml="$RESULTS/xml/$name/$rel/test.xml"
    mkdir -p "$(dirname "$xml")"
    rm -f "$xml"
    [ -f "$logs/$rel/test.xml" ] && cp "$logs/$rel/test.xml" "$xml"
    printf '%s\t%s\t%s\n' "$name" "$l" "$xml" >>"$RESULTS/xml.tsv"
  done
  return $rc
}

step "default build and all tests"
run_tests default -- //...

# Also in --quick: an annotation that lies fails here, not only in CI.
step "clang-14 thread-safety analysis (tools/clang_tsa.sh: --config=clang_tsa, -Wthread-safety -Werror)"
# The rules whose sources use the lock annotations (CUDA-only ones too where the CUDA
# headers exist), compiled only (about a minute cold), in their own output base.
if tools/clang_tsa.sh; then
  extra_result clang_thread_safety passed "clang-14 -Wthread-safety -Werror: built"
else
  extra_result clang_thread_safety failed "clang-14 -Wthread-safety -Werror: see the errors above"
fi

if [ "$MODE" != quick ]; then
  # Strict schema validation of the Kubernetes overlays (PyPI's kubernetes-validate in a
  # venv under ~/.cache/weft; seconds once the venv exists).
  step "Kubernetes manifests: strict schema validation (deploy/k8s/validate.sh)"
  if deploy/k8s/validate.sh >"$RESULTS/k8s-validate.log" 2>&1; then
    extra_result k8s_validate passed "deploy/k8s/validate.sh passed"
    grep -E '^(validated|ok|note)' "$RESULTS/k8s-validate.log" >&2
  else
    cat "$RESULTS/k8s-validate.log" >&2
    extra_result k8s_validate failed "deploy/k8s/validate.sh failed (output above)"
  fi

  if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    # Its own output tree and symlinks (.bazelrc): bazel-cuda-bin/..., while bazel-bin
    # stays the default build.
    step "CUDA build (--config=cuda, in bazel-cuda-bin) and its tests"
    if "${BAZEL[@]}" build --config=cuda --keep_going -- //...; then
      echo "CUDA: built"
      extra_result cuda_build passed "CUDA: built"
      # GPU tests (skip without a device) and the CUDA binaries' device-free tests.
      run_tests cuda --config=cuda -- $("${BAZEL[@]}" query --noshow_progress \
        "attr(tags, \"$CUDA_TAGS\", tests(//...))" 2>/dev/null | tr '\n' ' ')
    else
      echo "CUDA: FAILED"
      extra_result cuda_build failed "CUDA build failed"
    fi
  else
    echo "CUDA: skipped (no nvcc)"
    extra_result cuda_build skipped "CUDA: skipped (no nvcc)"
  fi

  # The CPU varies between machines (Xeons with and without AMX, AMD Zen 4): the kernel,
  # model and worker tests run again with the kernel choices of the families below this
  # one, by turning features off (kernels/cpu/cpu_features.h).
  CPU_FLAGS=$(grep -m1 '^flags' /proc/cpuinfo || true)
  for off in amx amx,avx512_bf16; do
    case $off in
      amx) has=amx_tile; family="Zen 4 (AVX-512 VNNI + BF16, no AMX)" ;;
      *) has=avx512_bf16; family="Xeon without AMX or AVX512_BF16" ;;
    esac
    [[ " $CPU_FLAGS " == *" $has "* ]] || continue
    step "kernel choices of a $family: WEFT_CPU_FEATURES_OFF=$off"
    run_tests "cpu_off_${off/,/_}" --test_env=WEFT_CPU_FEATURES_OFF=$off -- \
      //kernels/... //worker/model/... //worker:all //worker/backends/...
  done

  step "ASan/UBSan: parser, tokenizer, validation, block pool, planner"
  ASAN_TARGETS=$("${BAZEL[@]}" query --noshow_progress 'attr(tags, "asan", tests(//...))' 2>/dev/null | tr '\n' ' ')
  if [ -n "$ASAN_TARGETS" ]; then
    run_tests asan --config=asan -- $ASAN_TARGETS
  fi

  step "TSan: scheduler core, engine inbox, the write queue and the worker client (fake transports), the HTTP server, thread pool, shm communicator"
  TSAN_TARGETS=$("${BAZEL[@]}" query --noshow_progress 'attr(tags, "tsan", tests(//...))' 2>/dev/null | tr '\n' ' ')
  if [ -n "$TSAN_TARGETS" ]; then
    run_tests tsan --config=tsan -- $TSAN_TARGETS
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

  step "full: container images (deploy/image/image_test.py: build daemonless, run chroot'ed)"
  img_start=$(date +%s)
  WEFT_BAZEL="${BAZEL[*]}" "$PY" deploy/image/image_test.py --out "$ROOT/out/image"
  img_rc=$?
  img_s=$(( $(date +%s) - img_start ))
  case $img_rc in
    0) extra_result image_test passed "images built and run in ${img_s} s" ;;
    77) extra_result image_test skipped "image test skipped (see its message)" ;;
    *) extra_result image_test failed "deploy/image/image_test.py failed after ${img_s} s" ;;
  esac
  echo "image test: ${img_s} s" >&2
fi

[ -n "${CI:-}" ] || true
"$PY" tools/count_tests.py "$RESULTS/xml.tsv" "$RESULTS/extra.tsv"
