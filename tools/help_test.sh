#!/usr/bin/env bash
# tools/help_test.sh "BINARY FLAG"... — every Weft binary's --help lists its own flags
# (Abseil lists only files named after the program unless told otherwise: common/flags.h)
# and a bad command line exits 2 with a message.
set -uo pipefail
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
  err=$("$bin" --no_such_flag_here=1 2>&1 >/dev/null); rc=$?
  if [ "$rc" != 2 ] || ! grep -q "unknown flag --no_such_flag_here" <<<"$err"; then
    echo "FAIL: $name --no_such_flag_here exited $rc: $err"; fail=1
  fi
done
[ "$fail" = 0 ] && echo PASS
exit $fail
