#!/usr/bin/env bash
# The ISA-specific kernel libraries (built with -mavx2 / -mavx512* copts) must define no
# weak symbols: a weak (COMDAT) definition is inline or template code the linker may
# pick for callers in baseline code too, which would then run AVX instructions on a CPU
# that lacks them. Argument: `nm -C --defined-only` of their archives, each after a line
# "== <archive>" (made at build time by //kernels:isa_symbols).
set -euo pipefail
symbols=$1
archives=$(grep -c '^== ' "$symbols" || true)
[ "$archives" -gt 0 ] || { echo "FAIL: no archives listed in $symbols"; exit 1; }
weak=$(awk '/^== /{lib=$2; next} $2 ~ /^[WVu]$/ {print lib ": " $0}' "$symbols")
if [ -n "$weak" ]; then
  echo "FAIL: weak symbols (inline/template code shared with baseline code):"
  echo "$weak" | head -40
  exit 1
fi
echo "OK: $archives ISA archives define no weak symbols"
