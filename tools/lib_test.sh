#!/usr/bin/env bash
# tools/lib_test.sh — tools/lib.sh's contracts that ./test.sh and ./run.sh rely on: exit
# statuses pass through, stdout stays clean (test.sh's last stdout line is CI's result),
# progress lines appear while a command is silent, phase lines and the table have their
# format, and the platform check refuses other systems in one line.
set -uo pipefail
LIB=${1:-tools/lib.sh}
source "$LIB"
WEFT_PROGRESS_SECONDS=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
expect_grep() {  # file regex what
  grep -qE "$2" "$1" || { fail "$3: no line matching /$2/ in:"; cat "$1" >&2; }
}

# weft_bazel: the command's status, its stdout on stdout, its stderr lines on stderr, and a
# progress line naming the last "[...]" line while it is silent (a partial line stays whole).
noisy() {
  echo "result on stdout"
  echo "[1 / 2] compiling" >&2
  printf 'half ' >&2
  sleep 3  # the silence under test
  echo "a line" >&2
  return 3
}
weft_bazel "label" noisy >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" = 3 ] || fail "weft_bazel returned $rc, not the command's 3"
[ "$(cat "$TMP/out")" = "result on stdout" ] || fail "weft_bazel's stdout: $(cat "$TMP/out")"
expect_grep "$TMP/err" '^\[1 / 2\] compiling$' "stderr passes through"
expect_grep "$TMP/err" '^half a line$' "a partial line is kept whole"
expect_grep "$TMP/err" "^label: [0-9]+ s so far; last Bazel progress line \([0-9]+ s ago\): \[1 / 2\] compiling$" "progress line"
weft_bazel "label" true >"$TMP/out" 2>&1 || fail "weft_bazel true failed"

# weft_with_progress: status, and progress lines with the status function's words.
status_words() { echo "half done"; }
quiet() { sleep 3; return 5; }  # a silent command under test
weft_with_progress "apt" status_words quiet 2>"$TMP/err"
rc=$?
[ "$rc" = 5 ] || fail "weft_with_progress returned $rc, not 5"
expect_grep "$TMP/err" '^apt: [0-9]+ s so far \(half done\)$' "weft_with_progress line"

# Phases: markers and table on stderr only, the command's status returned, total last.
WEFT_PHASE_PROG=prog
weft_phase "one" true >"$TMP/out" 2>"$TMP/err" || fail "weft_phase one failed"
weft_phase "two" false >>"$TMP/out" 2>>"$TMP/err" && fail "weft_phase two did not return false's status"
weft_phase_begin "three" 2>>"$TMP/err"
weft_phase_end 2>>"$TMP/err"
weft_phase_table >>"$TMP/out" 2>>"$TMP/err"
[ ! -s "$TMP/out" ] || fail "phases wrote to stdout: $(cat "$TMP/out")"
expect_grep "$TMP/err" '^=== prog: one ===$' "phase start"
expect_grep "$TMP/err" '^=== prog: two: [0-9]+ s ===$' "phase end"
expect_grep "$TMP/err" '^=== prog: three: [0-9]+ s ===$' "inline phase end"
expect_grep "$TMP/err" '^  one +[0-9]+ s$' "table row"
[ "$(grep -c -E '^  (one|two|three) ' "$TMP/err")" = 3 ] || fail "the table does not list 3 phases"
tail -n 1 "$TMP/err" | grep -qE '^  total +[0-9]+ s  \([0-9]+ s\)$' || fail "the table's last row is not the total"

# The platform check.
printf 'ID=debian\nVERSION_ID="12"\n' >"$TMP/debian12"
printf 'ID=ubuntu\nVERSION_ID="22.04"\n' >"$TMP/ubuntu"
( uname() { echo x86_64; }; weft_check_platform prog "$TMP/debian12" ) 2>"$TMP/err" ||
  fail "Debian 12 x86-64 refused: $(cat "$TMP/err")"
( uname() { echo x86_64; }; weft_check_platform prog "$TMP/ubuntu" ) 2>"$TMP/err" &&
  fail "Ubuntu accepted"
[ "$(wc -l <"$TMP/err")" = 1 ] || fail "the refusal is not one line: $(cat "$TMP/err")"
expect_grep "$TMP/err" '^prog: .*Debian 12.*; this is ubuntu 22.04 on x86_64$' "refusal names the system"
( uname() { echo aarch64; }; weft_check_platform prog "$TMP/debian12" ) 2>/dev/null &&
  fail "aarch64 accepted"
( uname() { echo x86_64; }; weft_check_platform prog "$TMP/missing" ) 2>/dev/null &&
  fail "a system without os-release accepted"

[ "$failures" = 0 ] && echo "PASS" || { echo "$failures failure(s)"; exit 1; }
