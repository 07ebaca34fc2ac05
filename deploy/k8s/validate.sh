#!/usr/bin/env bash
# deploy/k8s/validate.sh [--k8s 1.30,newest] [DIR ...] — strict schema validation of the
# rendered overlays (validate.py) in a venv outside the repository with PyPI's
# kubernetes-validate (pinned: the Kubernetes versions it bundles are part of the check).
# The venv is made once ($WEFT_CACHE_DIR/venv-k8s-validate, default ~/.cache/weft/...).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${WEFT_CACHE_DIR:-$HOME/.cache/weft}/venv-k8s-validate
PIN=kubernetes-validate==1.37.0
if ! "$VENV/bin/python" -c 'import kubernetes_validate, yaml' 2>/dev/null ||
   [ "$(cat "$VENV/.weft-pin" 2>/dev/null)" != "$PIN" ]; then
  echo "validate.sh: making $VENV ($PIN)" >&2
  rm -rf "$VENV"
  # Debian's python3 (python3-venv, tools/bootstrap.sh); any python3 >= 3.9 would do.
  PY=/usr/bin/python3
  [ -x "$PY" ] || PY=python3
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "$PIN" >&2
  echo "$PIN" >"$VENV/.weft-pin"
fi
exec "$VENV/bin/python" "$HERE/validate.py" "$@"
