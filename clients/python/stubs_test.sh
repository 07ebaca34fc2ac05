#!/usr/bin/env bash
# stubs_test.sh COMMITTED FRESH [COMMITTED FRESH ...]: the committed Python stubs equal
# freshly generated ones (run clients/python/regenerate.sh after changing proto/).
set -uo pipefail
fail=0
while [ $# -ge 2 ]; do
  if ! diff -q "$1" "$2" >/dev/null; then
    echo "FAIL: $1 is stale: run clients/python/regenerate.sh"; fail=1
  else
    echo "ok: $(basename "$1")"
  fi
  shift 2
done
exit $fail
