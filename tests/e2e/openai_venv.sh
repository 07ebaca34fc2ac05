#!/usr/bin/env bash
# tests/e2e/openai_venv.sh — makes (once) the venv with PyPI's official `openai` client
# that openai_http_test drives Weft's OpenAI-compatible HTTP API with (and PyPI's
# `jsonschema`, sha256-pinned in jsonschema_requirements.txt, for structured_output_test),
# and prints the venv's python on stdout. The venv lives outside the repository:
# ${WEFT_CACHE_DIR:-~/.cache/weft}/venv-openai (reused while it has the pinned version).
#
# Exit 0: ready. Exit 3: the package index cannot be reached (or cannot provide the
# pinned version): the test skips, saying so. Anything else: a real failure.
set -euo pipefail

VERSION=3.57.0  # the client version the test was written against
CACHE=${WEFT_CACHE_DIR:-$HOME/.cache/weft}
VENV=$CACHE/venv-openai
PY=$VENV/bin/python

mkdir -p "$CACHE"
exec 9>"$CACHE/venv-openai.lock"
flock 9  # tests running at once build it once

REQS=$(dirname "$0")/jsonschema_requirements.txt
JSONSCHEMA=4.23.0  # as pinned there
have() {
  [ -x "$PY" ] && "$PY" -c "
import importlib.metadata as m, openai, jsonschema, sys
sys.exit(openai.__version__ != '$VERSION' or m.version('jsonschema') != '$JSONSCHEMA')" 2>/dev/null
}
if have; then
  echo "$PY"
  exit 0
fi
rm -rf "$VENV"
/usr/bin/python3 -m venv "$VENV" >&2
if ! "$VENV/bin/pip" install --disable-pip-version-check -q "openai==$VERSION" >&2; then
  probe=$(mktemp -d)
  if ! "$VENV/bin/pip" download --disable-pip-version-check --no-deps -q -d "$probe" "openai==$VERSION" >&2; then
    rm -rf "$VENV" "$probe"
    echo "openai_venv: cannot download openai==$VERSION from the Python package index (unreachable?)" >&2
    exit 3
  fi
  rm -rf "$VENV" "$probe"
  echo "openai_venv: the index has openai==$VERSION but installing it failed" >&2
  exit 1
fi
if ! "$VENV/bin/pip" install --disable-pip-version-check -q --require-hashes -r "$REQS" >&2; then
  rm -rf "$VENV"
  echo "openai_venv: installing jsonschema ($REQS) failed (index unreachable?)" >&2
  exit 3
fi
have || { echo "openai_venv: openai $VERSION or jsonschema $JSONSCHEMA does not import after installing" >&2; exit 1; }
echo "$PY"
