#!/usr/bin/env bash
# ./test.sh — installs what is missing and runs Weft's whole test suite (Debian 12, x86-64).
#
#   ./test.sh            what CI runs: default build + all tests; the CUDA targets built for
#                        one architecture (--config=cuda_ci, when nvcc exists) with their
#                        gpu/cuda-tagged tests; the kernel-choice tests again with the
#                        choices of the CPU families below this one (AMX/BF16 machines);
#                        ASan/UBSan on parser, tokenizer, validation, block-pool and
#                        planner tests; TSan on the scheduler core and the threaded code;
#                        clang-14's thread-safety analysis over the code that uses the lock
#                        annotations (tools/clang_tsa.sh); the fuzzers (1 minute in all,
#                        10 minutes under --full; tools/run_fuzzers.sh); the Kubernetes overlays validated strictly
#                        against their schemas (deploy/k8s/validate.sh).
#   ./test.sh --quick    default build + tests and the thread-safety analysis (iterating)
#   ./test.sh --only=cuda,fuzz   the bootstrap and the phases named (ids: default k8s cuda
#                        cpu_off_amx cpu_off_bf16 asan tsan clang_tsa fuzz soak
#                        slow_model requant gemma3 image)
#   ./test.sh --full     also the soak and long benchmarks (tools/soak, tools/bench), the
#                        slowest model tests (TP on forked ranks, batch invariance per
#                        kernel path: SLOW_MODEL_TESTS below), the
#                        default model re-quantized by llama-quantize to Q4_K_M / Q6_K /
#                        Q5_0 against llama.cpp (tools/quant/full.sh), the real Gemma 3
#                        270M against llama.cpp (worker/model:gemma3_accuracy_test) with
#                        structured output on it (grammar_engine_gemma3_test,
#                        structured_output_gemma3_test) and
#                        the container images: built daemonless (debootstrap, umoci) and
#                        run chroot'ed (deploy/image/image_test.py; needs root and the
#                        Debian mirror; about 2-3 minutes cold, see deploy/README.md)
#
# Every phase ends with "=== test.sh: <phase>: N s ===", and a table of the phases' times
# comes before the last line, which is "N passed, N failed, N skipped", counting gtest
# cases from Bazel's test.xml files (Bazel itself reports a skipped gtest as passed), plus
# one entry per fuzzer run and per extra check (CUDA build, k8s, thread safety). Exit
# status 0 only when nothing failed. A new phase is a function and one `phase` line below
# (and its id in PHASE_IDS).
set -uo pipefail

cd "$(dirname "$0")"
ROOT=$PWD
MODE=ci
ONLY=""
PHASE_IDS=" default k8s cuda cpu_off_amx cpu_off_bf16 asan tsan clang_tsa fuzz soak slow_model requant gemma3 image "
for arg in "$@"; do
  case "$arg" in
    --quick) MODE=quick ;;
    --full) MODE=full ;;
    --only=*)
      MODE=only
      ONLY=${arg#--only=}
      for id in ${ONLY//,/ }; do
        [[ $PHASE_IDS == *" $id "* ]] || { echo "test.sh: no phase '$id' (phases:$PHASE_IDS)" >&2; exit 2; }
      done ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown flag $arg" >&2; exit 2 ;;
  esac
done

source tools/lib.sh
WEFT_PHASE_PROG=test.sh
weft_check_platform test.sh

RESULTS=$(mktemp -d)
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

# One Bazel server per output base for the whole run (a --batch invocation would pay the
# JVM start and the loading and analysis of every package again, about 15 s each time); in
# CI they are shut down when the suite ends.
BAZEL=(bazel "${WEFT_BAZEL_STARTUP[@]}")
TEST_FLAGS=("${WEFT_BAZEL_BUILD_FLAGS[@]}")
if [ -n "${CI:-}" ] || [ "$MODE" = full ]; then
  TEST_FLAGS+=(--nocache_test_results)  # results are never cached across runs
fi
cleanup() {
  rm -rf "$RESULTS"
  if [ -n "${CI:-}" ]; then
    for base in "" "$WEFT_CLANG_OUTPUT_BASE"; do
      [ -z "$base" ] || [ -d "$base" ] || continue
      "${BAZEL[@]}" ${base:+--output_base="$base"} shutdown >/dev/null 2>&1
    done
  fi
}
trap cleanup EXIT

extra_result() {  # name passed|failed|skipped message
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$RESULTS/extra.tsv"
}

# query EXPRESSION: the labels, space-separated. A failing query is reported (a phase must
# not pass by finding no targets) and returns non-zero.
query() {
  local out
  if ! out=$("${BAZEL[@]}" query --noshow_progress "$1" 2>"$RESULTS/query.err"); then
    cat "$RESULTS/query.err" >&2
    extra_result "bazel query" failed "bazel query failed: $1"
    return 1
  fi
  echo $out
}

# Tags of the tests that need the CUDA build: "gpu" (skip without a device) and "cuda"
# (the CUDA-built binaries, no device needed). A regex over the tags list.
CUDA_TAGS='[\[ ](gpu|cuda)[,\]]'
MANUAL_TAG='[\[ ]manual[,\]]'

# run_tests <name> <flags...> -- <targets...>: bazel test (tests only, unless the flags say
# --nobuild_tests_only) and records where each test's test.xml lives. Returns Bazel's exit
# status (0 passed, 1 build failed, 3 tests failed, 4 no tests).
run_tests() {
  local name=$1
  shift
  local flags=()
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  local targets=("$@")
  local tests="tests(set(${targets[*]}))"
  # Manual tests (the --full phases run them by name) are not run here: not counted.
  tests="$tests except attr(tags, \"$MANUAL_TAG\", $tests)"
  if [[ " ${flags[*]} " != *" --config=cuda"* ]]; then
    # Tests tagged gpu or cuda exist only in CUDA builds (elsewhere Bazel skips them as
    # incompatible and writes no test.xml): not counted here.
    tests="$tests except attr(tags, \"$CUDA_TAGS\", $tests)"
  fi
  local labels
  labels=$(query "$tests") || return 1
  weft_bazel "test.sh: $name" "${BAZEL[@]}" test --build_tests_only "${flags[@]}" \
    "${TEST_FLAGS[@]}" --test_tag_filters=-manual --keep_going -- "${targets[@]}"
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
    rm -f "$(dirname "$xml")"/*.xml
    if [ ! -f "$logs/$rel/test.xml" ] && compgen -G "$logs/$rel/shard_*_of_*/test.xml" >/dev/null; then
      # A sharded test (shard_count): one test.xml per shard, each counted.
      local shard
      for shard in "$logs/$rel"/shard_*_of_*/test.xml; do
        xml="$RESULTS/xml/$name/$rel/$(basename "$(dirname "$shard")").xml"
        cp "$shard" "$xml"
        printf '%s\t%s\t%s\n' "$name" "$l" "$xml" >>"$RESULTS/xml.tsv"
      done
      continue
    fi
    [ -f "$logs/$rel/test.xml" ] && cp "$logs/$rel/test.xml" "$xml"
    printf '%s\t%s\t%s\n' "$name" "$l" "$xml" >>"$RESULTS/xml.tsv"
  done
  return $rc
}

# --- phases -------------------------------------------------------------------------------

bootstrap_phase() {
  if ! tools/bootstrap.sh; then
    echo "test.sh: bootstrap failed; see the message above" >&2
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
  fi
  # Tests find models/ through the runfiles symlink of tools/models.txt (no env needed).
}

default_phase() {
  weft_trim_disk_cache
  run_tests default -- //...
}

# Strict schema validation of the Kubernetes overlays (PyPI's kubernetes-validate in a venv
# under ~/.cache/weft: about 40 s to make once, 15 s to validate).
k8s_phase() {
  if weft_with_progress "test.sh: k8s" "" deploy/k8s/validate.sh >"$RESULTS/k8s-validate.log" 2>&1; then
    extra_result k8s_validate passed "deploy/k8s/validate.sh passed"
    grep -E '^(validated|ok|note)' "$RESULTS/k8s-validate.log" >&2
  else
    cat "$RESULTS/k8s-validate.log" >&2
    extra_result k8s_validate failed "deploy/k8s/validate.sh failed (output above)"
  fi
}

# CUDA: every CUDA-only rule (incompatible outside a CUDA build: the nvcc archives, the
# CUDA backend, NCCL, the GPU tests and benchmark), the gpu/cuda-tagged tests and the
# binaries that link the CUDA backend (weft-worker), compiled and linked with
# --config=cuda_ci (one architecture, in the default output tree: .bazelrc); the tests
# among them run (gpu: skip without a device; cuda: the CUDA binaries without a device).
# Release builds (--config=cuda, bazel-cuda-bin/) keep every architecture.
cuda_phase() {
  if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    echo "CUDA: skipped (no nvcc)"
    extra_result cuda_build skipped "CUDA: skipped (no nvcc)"
    return 0
  fi
  local targets
  targets=$(query "attr(target_compatible_with, 'incompatible', //...)
    + attr(tags, \"$CUDA_TAGS\", tests(//...))
    + kind(cc_binary, rdeps(//..., //worker/backends:cuda_factory))") || return 1
  run_tests cuda --config=cuda_ci --nobuild_tests_only -- $targets
  case $? in
    0|3) echo "CUDA: built"; extra_result cuda_build passed "CUDA (--config=cuda_ci): built" ;;
    *) echo "CUDA: FAILED"; extra_result cuda_build failed "CUDA build failed (--config=cuda_ci)" ;;
  esac
  # PTX beside the SASS (third_party/cuda.bzl): the CUDA weft-worker built just now.
  local worker
  worker="$("${BAZEL[@]}" info --config=cuda_ci bazel-bin 2>/dev/null)/worker/service/weft-worker"
  if tools/ptx_check.sh "$worker" >&2; then
    extra_result ptx_check passed "CUDA weft-worker embeds PTX for its newest architecture"
  else
    extra_result ptx_check failed "tools/ptx_check.sh: the CUDA weft-worker lacks PTX (above)"
  fi
  if [ -z "${CI:-}" ]; then
    # The CUDA weft-worker replaced the default one in bazel-bin: put the CPU one back.
    weft_bazel "test.sh: cuda" "${BAZEL[@]}" build "${WEFT_BAZEL_BUILD_FLAGS[@]}" \
      //worker/service:weft-worker
  fi
}

# The CPU varies between machines (Xeons with and without AMX, AMD Zen 4): the tests that
# link the kernel choice (//kernels:cpu_features, which reads WEFT_CPU_FEATURES_OFF) among
# the kernel, model and worker tests run again with the choices of a family below this one.
KERNEL_TESTS="//kernels/... + //worker/model/... + //worker:all + //worker/backends/..."
cpu_off_phase() {  # amx | amx,avx512_bf16
  local off=$1 targets
  targets=$(query "let t = tests($KERNEL_TESTS)
    except attr(target_compatible_with, 'incompatible', tests($KERNEL_TESTS)) in
    \$t intersect rdeps(\$t, //kernels:cpu_features)") || return 1
  run_tests "cpu_off_${off/,/_}" --test_env=WEFT_CPU_FEATURES_OFF="$off" -- $targets
}

# sanitizer_phase CONFIG: the tests tagged CONFIG (asan, tsan) under --config=CONFIG.
sanitizer_phase() {
  local targets
  targets=$(query "attr(tags, \"$1\", tests(//...))") || return 1
  [ -z "$targets" ] || run_tests "$1" --config="$1" -- $targets
}

clang_tsa_phase() {
  if tools/clang_tsa.sh; then
    extra_result clang_thread_safety passed "clang-14 -Wthread-safety -Werror: built"
  else
    extra_result clang_thread_safety failed "clang-14 -Wthread-safety -Werror: see the errors above"
  fi
}

# CI: 60 s shared by the fuzzers (10 s each: a regression check on the committed corpora,
# with a fixed seed, so that every machine runs a prefix of one sequence of inputs and a
# change cannot fail by the luck of the draw); --full: 600 s shared with random seeds, to
# find new inputs.
fuzz_phase() {
  local budget=60 seed=1
  [ "$MODE" = full ] && budget=600 && seed=0
  WEFT_FUZZ_BUDGET_SECONDS=${WEFT_FUZZ_BUDGET_SECONDS:-$budget} \
    WEFT_FUZZ_SEED=${WEFT_FUZZ_SEED:-$seed} \
    tools/run_fuzzers.sh "${WEFT_FUZZ_SECONDS:-auto}" "$RESULTS/extra.tsv"
}

soak_phase() {
  local t
  for t in tools/soak/run.sh tools/bench/full.sh; do
    if [ -x "$t" ]; then
      if "$t"; then extra_result "$t" passed ""; else extra_result "$t" failed ""; fi
    fi
  done
}

# The default model re-quantized to Q4_K_M, Q6_K and Q5_0 against llama.cpp: builds
# llama-quantize from the pinned sdist once (cached under ~/.cache/weft, 15-25 minutes
# cold), re-quantizes once, checks each file's sha256, then
# //worker/model:requant_accuracy_test (greedy and perplexity against llama.cpp).
requant_phase() {
  if tools/quant/full.sh; then
    extra_result requant_accuracy passed "re-quantized models agree with llama.cpp"
  else
    extra_result requant_accuracy failed "tools/quant/full.sh failed (output above)"
  fi
}

# run_named_tests NAME TARGET...: tests tagged manual (outside run_tests' tag filter), run
# by name in a --full phase; their test.xml files are counted like the others.
run_named_tests() {
  local name=$1 target rel logs xml
  shift
  weft_bazel "test.sh: $name" "${BAZEL[@]}" test "${TEST_FLAGS[@]}" --test_output=errors \
    -- "$@"
  local rc=$?
  logs=$("${BAZEL[@]}" info bazel-testlogs 2>/dev/null)
  for target in "$@"; do
    rel=${target#//}
    rel=${rel/://}
    xml="$RESULTS/xml/full/$rel/test.xml"
    mkdir -p "$(dirname "$xml")"
    rm -f "$xml"
    [ -f "$logs/$rel/test.xml" ] && cp "$logs/$rel/test.xml" "$xml"
    printf '%s\t%s\t%s\n' full "$target" "$xml" >>"$RESULTS/xml.tsv"
  done
  return $rc
}

# The real Gemma 3 270M against llama.cpp (greedy continuations, perplexity), and structured
# output on it (its vocabulary's masks; the e2e schema, regex, choice and tool checks with
# llama.cpp's Gemma chat template). Tagged manual (they need the optional model).
gemma3_phase() {
  if ! tools/bootstrap.sh --no-packages --model gemma3-270m; then
    extra_result gemma3_accuracy_test failed "tools/bootstrap.sh --model gemma3-270m failed"
    return 1
  fi
  run_named_tests gemma3 //worker/model:gemma3_accuracy_test \
    //scheduler/grammar:grammar_engine_gemma3_test //tests/e2e:structured_output_gemma3_test
}

# The slowest model tests, tagged manual to keep CI within its budget (each has a faster
# twin in CI: tests/e2e:tp_greedy_test, tests/e2e:batch_invariance_test): tensor
# parallelism's logits and perplexity on forked ranks (TP = 2, 3), and the model's batch
# invariance on every kernel path.
SLOW_MODEL_TESTS=(//worker/backends:cpu_backend_tp_test //worker/model:llama_batch_invariance_test)
slow_model_phase() {
  run_named_tests slow_model "${SLOW_MODEL_TESTS[@]}"
}

image_phase() {
  local start=$SECONDS rc
  WEFT_BAZEL="${BAZEL[*]}" "$PY" deploy/image/image_test.py --out "$ROOT/out/image"
  rc=$?
  case $rc in
    0) extra_result image_test passed "images built and run in $((SECONDS - start)) s" ;;
    77) extra_result image_test skipped "image test skipped (see its message)" ;;
    *) extra_result image_test failed "deploy/image/image_test.py failed after $((SECONDS - start)) s" ;;
  esac
}

# --- the suite ----------------------------------------------------------------------------

# phase ID NAME FUNCTION [ARGS...]: runs FUNCTION as a timed phase (in the table), unless
# --only leaves ID out. ID: a short name for --only (add it to PHASE_IDS).
phase() {
  local id=$1
  shift
  [ -z "$ONLY" ] || [ "$id" = bootstrap ] || [[ ",$ONLY," == *",$id,"* ]] || return 0
  weft_phase "$@"
}

phase bootstrap "bootstrap (packages, model)" bootstrap_phase
phase default "default build and all tests" default_phase
# Also in --quick: an annotation that lies fails here, not only in CI.
phase clang_tsa "clang-14 thread-safety analysis (tools/clang_tsa.sh)" clang_tsa_phase

if [ "$MODE" != quick ]; then
  phase k8s "Kubernetes manifests (deploy/k8s/validate.sh)" k8s_phase
  phase cuda "CUDA build (--config=cuda_ci) and its tests" cuda_phase
  CPU_FLAGS=$(grep -m1 '^flags' /proc/cpuinfo || true)
  if [[ " $CPU_FLAGS " == *" amx_tile "* ]]; then
    phase cpu_off_amx "kernel choices of a Zen 4 (WEFT_CPU_FEATURES_OFF=amx)" cpu_off_phase amx
  fi
  if [[ " $CPU_FLAGS " == *" avx512_bf16 "* ]]; then
    phase cpu_off_bf16 "kernel choices of a Xeon without AMX/BF16 (off=amx,avx512_bf16)" \
      cpu_off_phase amx,avx512_bf16
  fi
  phase asan "ASan/UBSan (tests tagged asan)" sanitizer_phase asan
  phase tsan "TSan (tests tagged tsan)" sanitizer_phase tsan
  phase fuzz "fuzzers (tools/run_fuzzers.sh)" fuzz_phase
fi

if [ "$MODE" = full ] || [ "$MODE" = only ]; then
  phase soak "full: soak and long benchmarks" soak_phase
  phase slow_model "full: TP on forked ranks, batch invariance per kernel path" slow_model_phase
  phase requant "full: re-quantized models (Q4_K_M, Q6_K, Q5_0) vs llama.cpp" requant_phase
  phase gemma3 "full: Gemma 3 270M against llama.cpp, structured output on it" gemma3_phase
  phase image "full: container images (deploy/image/image_test.py)" image_phase
fi

summary=$("$PY" tools/count_tests.py "$RESULTS/xml.tsv" "$RESULTS/extra.tsv")
rc=$?
weft_phase_table
echo "$summary"
exit $rc
