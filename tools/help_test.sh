#!/usr/bin/env bash
# tools/help_test.sh VERSION_FILE "BINARY FLAG"... — every Weft binary's --help lists its
# own flags (Abseil lists only files named after the program unless told otherwise:
# common/flags.h), a bad command line exits 2 with a message, and --version prints
# "<binary> <VERSION> (revision <git commit>[-dirty]|unknown)" and exits 0.
set -uo pipefail
version=$(tr -d ' \n' <"$1")
shift
fail=0
for spec in "$@"; do
  bin=${spec% *}
  flag=${spec##* }
  name=$(basename "$bin")
  out=$("$bin" --help 2>&1)
  if grep -q "No flags matched" <<<"$out"; then
    echo "FAIL: $name --help says 'No flags matched'"; fail=1
  elif ! grep -q -- "--$flag " <<<"$out"; then
    echo "FAIL: $name --help does not list --$flag:"; echo "$out" | head -20; fail=1
  else
    echo "ok: $name --help lists --$flag"
  fi
  out=$("$bin" --version 2>/dev/null); rc=$?
  if [ "$rc" != 0 ] || ! grep -qE "^$name $version \(revision ([0-9a-f]{40}(-dirty)?|unknown)\)$" <<<"$out"; then
    echo "FAIL: $name --version exited $rc: $out"; fail=1
  else
    echo "ok: $out"
  fi
  err=$("$bin" --no_such_flag_here=1 2>&1 >/dev/null); rc=$?
  if [ "$rc" != 2 ] || ! grep -q "unknown flag --no_such_flag_here" <<<"$err"; then
    echo "FAIL: $name --no_such_flag_here exited $rc: $err"; fail=1
  fi
done
[ "$fail" = 0 ] && echo PASS
exit $fail
