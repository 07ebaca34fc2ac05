#!/usr/bin/env bash
# tools/clang_tsa.sh [--list | BAZEL_BUILD_FLAGS...] — clang-14's thread-safety analysis (--config=clang_tsa:
# -Wthread-safety -Werror) over the code that uses the annotations: the C++ rules whose
# own sources or headers include common/mutex.h or carry an ABSL_* lock annotation
# (found by grep, so a new user is checked without editing this script), tests included.
# Only those rules' own translation units are compiled (--output_groups=
# compilation_outputs: nothing is linked, their dependencies' sources are not compiled):
# a header-only annotated class is checked in every target that includes it.
# CUDA-only rules (cuda_cc_*, e.g. the NCCL communicator) are checked too where the CUDA
# headers are installed: their .cc files are host C++, compiled here by clang with
# --define=cuda=1 (nothing is linked and no .cu file is compiled, so no GPU and no nvcc
# run is needed); without the headers they are left out, saying so.
# --list prints the labels and exits; other arguments go to `bazel build` (e.g.
# --disk_cache= to time it cold). Exit status: the build's.
# The clang-14 output base (WEFT_TSA_OUTPUT_BASE, default WEFT_CLANG_OUTPUT_BASE of
# tools/lib.sh, shared with the fuzzers): switching the C compiler in the default one would
# throw away the default build's cache.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/lib.sh
BASE=${WEFT_TSA_OUTPUT_BASE:-$WEFT_CLANG_OUTPUT_BASE}
BAZEL=(bazel "${WEFT_BAZEL_STARTUP[@]}" --output_base="$BASE")
QUERY=(bazel "${WEFT_BAZEL_STARTUP[@]}")

# Sources that use the annotations, as Bazel file labels (//package:path/in/package).
PATTERN='common/mutex\.h|ABSL_[A-Z_]*(GUARDED_BY|LOCKS_EXCLUDED|LOCKS_REQUIRED|LOCK_FUNCTION|LOCKABLE|LOCK_RETURNED|ACQUIRED_(AFTER|BEFORE)|ASSERT_[A-Z_]*LOCK|NO_THREAD_SAFETY_ANALYSIS)'
files=$(grep -rlE "$PATTERN" --include='*.h' --include='*.cc' \
  --exclude-dir='bazel-*' --exclude-dir=.git --exclude-dir=third_party . | sort)
labels=()
for f in $files; do
  f=${f#./}
  d=$(dirname "$f")
  while [ "$d" != . ] && [ ! -f "$d/BUILD.bazel" ] && [ ! -f "$d/BUILD" ]; do d=$(dirname "$d"); done
  if [ "$d" = . ]; then labels+=("//:$f"); else labels+=("//$d:${f#"$d"/}"); fi
done

# The C++ rules that list one of them in srcs/hdrs; CUDA-only ones (cuda_cc_*: their
# target_compatible_with is @platforms//:incompatible without --define=cuda=1) only where
# the CUDA headers exist. Queried with the default server: a //... pattern in another
# output base would wander into the default base's convenience symlinks.
CUDA_FLAGS=()
USERS="kind('cc_(library|binary|test)', rdeps(//..., set(${labels[*]}), 1))"
if [ -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_runtime_api.h" ]; then
  CUDA_FLAGS=(--define=cuda=1)
  query="$USERS"
else
  echo "clang_tsa.sh: no CUDA headers: CUDA-only rules are not checked" >&2
  query="let users = $USERS in \$users except attr(target_compatible_with, 'incompatible', \$users)"
fi
targets=$("${QUERY[@]}" query --noshow_progress "$query" 2>/dev/null)
if [ -z "$targets" ]; then
  echo "clang_tsa.sh: no targets found (query failed?)" >&2
  exit 1
fi
if [ "${1:-}" = --list ]; then
  echo "$targets"
  exit 0
fi
echo "clang_tsa.sh: $(echo "$targets" | wc -l) targets" >&2
# --symlink_prefix=/ keeps bazel-bin & co pointing at the default build.
weft_bazel "clang_tsa.sh" "${BAZEL[@]}" build "${WEFT_BAZEL_BUILD_FLAGS[@]}" \
  --config=clang_tsa "${CUDA_FLAGS[@]}" --symlink_prefix=/ --keep_going \
  --output_groups=compilation_outputs "$@" -- $targets
