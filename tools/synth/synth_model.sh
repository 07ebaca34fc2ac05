#!/usr/bin/env bash
# tools/synth/synth_model.sh PRESET TYPES SEED SHA256 — prints the path of the synthetic
# model tools/synth/make_model.py writes for (PRESET, TYPES, SEED), made once into
# ${WEFT_CACHE_DIR:-~/.cache/weft}/synthetic/ and checked against SHA256 (the one the
# reference data recorded). The generator runs in a venv outside the repository,
# ${WEFT_CACHE_DIR:-~/.cache/weft}/venv-synth, with the pinned gguf and numpy (made once).
#
# Exit 0: the path is on stdout. Exit 3: the package index cannot be reached to make
# the venv (tests skip, saying so). Exit 4: the generated file has another sha256 (the
# generator or its pinned packages changed: regenerate the references). Else: failure.
set -euo pipefail

[ $# -eq 4 ] || { echo "usage: $0 PRESET TYPES SEED SHA256" >&2; exit 2; }
PRESET=$1 TYPES=$2 SEED=$3 WANT=$4
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${WEFT_CACHE_DIR:-$HOME/.cache/weft}
VENV=$CACHE/venv-synth
PY=$VENV/bin/python
PINS=(gguf==0.19.0 numpy==2.4.6)
OUT=$CACHE/synthetic
FILE=$OUT/$PRESET.$TYPES.s$SEED.gguf

mkdir -p "$OUT"
exec 9>"$CACHE/venv-synth.lock"
flock 9  # tests running at once make the venv and each file once

if [ -f "$FILE" ] && [ "$(sha256sum "$FILE" | cut -d' ' -f1)" = "$WANT" ]; then
  echo "$FILE"
  exit 0
fi
have() { [ -x "$PY" ] && "$PY" -c "
import sys, gguf, numpy
from importlib.metadata import version
sys.exit(not (version('gguf') == '0.19.0' and numpy.__version__ == '2.4.6'))" 2>/dev/null; }
if ! have; then
  rm -rf "$VENV"
  /usr/bin/python3 -m venv "$VENV" >&2
  if ! "$VENV/bin/pip" install --disable-pip-version-check -q "${PINS[@]}" >&2; then
    rm -rf "$VENV"
    echo "synth_model: cannot install ${PINS[*]} from the Python package index" >&2
    exit 3
  fi
  have || { echo "synth_model: ${PINS[*]} do not import after installing" >&2; exit 1; }
fi
"$PY" "$HERE/make_model.py" --preset "$PRESET" --types "$TYPES" --seed "$SEED" \
  --out "$OUT" >/dev/null
GOT=$(sha256sum "$FILE" | cut -d' ' -f1)
if [ "$GOT" != "$WANT" ]; then
  echo "synth_model: $FILE has sha256 $GOT, the references were made from $WANT" >&2
  exit 4
fi
echo "$FILE"
