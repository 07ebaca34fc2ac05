# tools/lib.sh — shell helpers shared by run.sh, test.sh and tools/*.sh (sourced, not run):
# the supported platform, Bazel's flags outside the repository (disk cache, CI servers),
# progress lines on long steps, and phase timing. Bash 5; callers may use `set -u`.

WEFT_CACHE_DIR=${WEFT_CACHE_DIR:-$HOME/.cache/weft}
# Bazel's disk cache, shared by every output base and checkout on this machine (action
# results keyed by their inputs and command line: a second run reuses the first's
# compilations). Set WEFT_DISK_CACHE= (empty) to build without one, e.g. to time a cold
# build; Bazel does not expand ~ in rc files, so the scripts pass it.
WEFT_DISK_CACHE=${WEFT_DISK_CACHE-$WEFT_CACHE_DIR/bazel-disk}
WEFT_BAZEL_BUILD_FLAGS=(--disk_cache="$WEFT_DISK_CACHE")
# Bazel 4 never trims the disk cache: weft_trim_disk_cache (test.sh, before building)
# deletes the entries nobody read for 14 days once it holds more than
# WEFT_DISK_CACHE_MAX_MB (default 20000; a cold ./test.sh adds about 1 GB).
weft_trim_disk_cache() {
  local max=${WEFT_DISK_CACHE_MAX_MB:-20000} mb
  [ -n "$WEFT_DISK_CACHE" ] && [ -d "$WEFT_DISK_CACHE" ] || return 0
  mb=$(du -sm "$WEFT_DISK_CACHE" | cut -f1)
  if [ "$mb" -gt "$max" ]; then
    echo "disk cache $WEFT_DISK_CACHE: $mb MB > $max MB: deleting entries unread for 14 days" >&2
    find "$WEFT_DISK_CACHE" -type f -atime +14 -delete
  fi
}
# The output base of the clang-14 builds (tools/clang_tsa.sh, tools/run_fuzzers.sh): not
# the default one, where switching the C compiler would discard the gcc build's analysis
# and toolchain; one for both (same compiler), so one server and one repository setup.
WEFT_CLANG_OUTPUT_BASE=${WEFT_CLANG_OUTPUT_BASE:-$WEFT_CACHE_DIR/bazel-clang}
# In CI (CI set) Bazel servers quit after 10 idle minutes, should test.sh be killed before
# it shuts them down; elsewhere Bazel's default (3 hours) keeps the edit-build-test loop
# warm. (A server started with other startup flags is restarted, once.)
WEFT_BAZEL_STARTUP=()
if [ -n "${CI:-}" ]; then WEFT_BAZEL_STARTUP=(--max_idle_secs=600); fi
# A progress line at least this often (seconds) on long steps.
WEFT_PROGRESS_SECONDS=${WEFT_PROGRESS_SECONDS:-25}

# weft_check_platform PROG [OS_RELEASE]: Debian 12 on x86-64 is what Weft builds and runs
# on (Debian's packages, Bazel 4.2.3, the ISA kernels); elsewhere one line and exit status
# 1. OS_RELEASE: the os-release file (default /etc/os-release).
weft_check_platform() {
  local release=${2:-/etc/os-release} id="" ver="" arch
  arch=$(uname -m)
  if [ -r "$release" ]; then
    id=$(. "$release" && echo "${ID:-}")
    ver=$(. "$release" && echo "${VERSION_ID:-}")
  fi
  if [ "$id" != debian ] || [ "$ver" != 12 ] || [ "$arch" != x86_64 ]; then
    echo "$1: Weft builds and runs on Debian 12 (x86-64) only; this is ${id:-an unknown OS}${ver:+ $ver} on $arch" >&2
    exit 1
  fi
}

# weft_duration SECONDS: "75 s" or "12 min 5 s".
weft_duration() {
  if [ "$1" -lt 60 ]; then echo "$1 s"; else echo "$(($1 / 60)) min $(($1 % 60)) s"; fi
}

# weft_bazel LABEL BAZEL_COMMAND...: runs it. When stderr is not a terminal (CI, a log)
# Bazel spaces its progress lines by 15 % of the time elapsed (minutes apart late in a long
# build): its stderr then passes through a filter that adds "LABEL: N s so far; last
# Bazel progress line (N s ago): ..." whenever WEFT_PROGRESS_SECONDS pass without a line.
# On a terminal Bazel's own progress bar is left alone. Returns the command's exit status.
weft_bazel() {
  local label=$1 rc
  shift
  if [ -t 2 ]; then
    "$@"
    return
  fi
  { "$@" 2>&1 1>&3 3>&- | _weft_progress_filter "$label"; rc=${PIPESTATUS[0]}; } 3>&1
  return "$rc"
}

_weft_progress_filter() {
  local label=$1 line pending="" last="" last_at=0 rc start=$SECONDS
  while :; do
    IFS= read -r -t "$WEFT_PROGRESS_SECONDS" line
    rc=$?
    if [ "$rc" -eq 0 ]; then
      line=$pending$line
      pending=""
      printf '%s\n' "$line" >&2
      case $line in \[*) last=$line; last_at=$SECONDS ;; esac
    elif [ "$rc" -gt 128 ]; then  # no line for a while (a partial one is kept)
      pending+=$line
      printf '%s: %s so far%s\n' "$label" "$(weft_duration $((SECONDS - start)))" \
        "${last:+; last Bazel progress line ($(weft_duration $((SECONDS - last_at))) ago): $last}" >&2
    else
      [ -z "$pending$line" ] || printf '%s\n' "$pending$line" >&2
      return 0
    fi
  done
}

# weft_with_progress LABEL STATUS_FUNCTION COMMAND...: runs COMMAND (its output is the
# caller's to redirect) and prints "LABEL: N s so far (<STATUS_FUNCTION's output>)" every
# WEFT_PROGRESS_SECONDS until it ends (STATUS_FUNCTION may be "" for none). Returns the
# command's exit status.
weft_with_progress() {
  local label=$1 status_fn=$2 pid start=$SECONDS next status
  shift 2
  "$@" &
  pid=$!
  next=$((SECONDS + WEFT_PROGRESS_SECONDS))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ "$SECONDS" -ge "$next" ] && kill -0 "$pid" 2>/dev/null; then
      status=""
      [ -z "$status_fn" ] || status=$("$status_fn" 2>/dev/null)
      echo "$label: $(weft_duration $((SECONDS - start))) so far${status:+ ($status)}" >&2
      next=$((SECONDS + WEFT_PROGRESS_SECONDS))
    fi
  done
  wait "$pid"
}

# Phase timing: weft_phase NAME COMMAND... runs COMMAND between "=== PROG: NAME ===" and
# "=== PROG: NAME: N s ===" (PROG: $WEFT_PHASE_PROG) and records the time, returning the
# command's exit status; weft_phase_begin NAME / weft_phase_end do the same around inline
# code; weft_phase_table prints every phase's time and the total since the first phase.
WEFT_PHASE_PROG=${WEFT_PHASE_PROG:-$(basename "$0")}
WEFT_PHASE_NAMES=()
WEFT_PHASE_SECONDS=()
WEFT_PHASES_START=""
_WEFT_PHASE_NAME=""
_WEFT_PHASE_START=0
weft_phase_begin() {
  [ -n "$WEFT_PHASES_START" ] || WEFT_PHASES_START=$SECONDS
  _WEFT_PHASE_NAME=$1
  _WEFT_PHASE_START=$SECONDS
  echo "=== $WEFT_PHASE_PROG: $1 ===" >&2
}

weft_phase_end() {
  local s=$((SECONDS - _WEFT_PHASE_START))
  WEFT_PHASE_NAMES+=("$_WEFT_PHASE_NAME")
  WEFT_PHASE_SECONDS+=("$s")
  echo "=== $WEFT_PHASE_PROG: $_WEFT_PHASE_NAME: $s s ===" >&2
}

weft_phase() {
  local rc
  weft_phase_begin "$1"
  shift
  "$@"
  rc=$?
  weft_phase_end
  return "$rc"
}

weft_phase_table() {
  local i total=$((SECONDS - ${WEFT_PHASES_START:-$SECONDS}))
  echo "=== $WEFT_PHASE_PROG: phase times ($(nproc) cores) ===" >&2
  for i in "${!WEFT_PHASE_NAMES[@]}"; do
    printf '  %-44s %6d s\n' "${WEFT_PHASE_NAMES[$i]}" "${WEFT_PHASE_SECONDS[$i]}" >&2
  done
  printf '  %-44s %6d s  (%s)\n' "total" "$total" "$(weft_duration "$total")" >&2
}
