#!/usr/bin/env bash
# Builds llama.cpp's llama-quantize, and nothing else of llama.cpp, from the pinned PyPI
# sdist of llama-cpp-python 0.3.36 (it vendors llama.cpp build 0c1e570), outside the
# repository, cached under ~/.cache/weft/llama-quantize-0.3.36 (about 15-25 minutes on
# 2 cores the first time, nothing afterwards). Prints the binary's path on stdout.
#
#   tools/quant/build_llama_quantize.sh            # uses/fills the cache
#   LLAMA_SDIST=/path/to/llama_cpp_python-0.3.36.tar.gz tools/quant/build_llama_quantize.sh
#
# The sdist is fetched with pip (the package index must be reachable once) unless
# LLAMA_SDIST names a local copy; either way its sha256 is checked. GGML_NATIVE=OFF: the
# quantizer is ggml-base's portable C either way, so the files it writes do not depend
# on the machine (tools/quant/full.sh checks their sha256).
set -euo pipefail
VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
CACHE=${WEFT_CACHE:-$HOME/.cache/weft}
DIR=$CACHE/llama-quantize-$VERSION
BIN=$DIR/build/bin/llama-quantize
log() { echo "build_llama_quantize: $*" >&2; }
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$CACHE/sdist" "$DIR"
SDIST=${LLAMA_SDIST:-$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz}
if [ ! -f "$SDIST" ]; then
  log "fetching llama-cpp-python==$VERSION (sdist)"
  tmp=$(mktemp -d)
  python3 -m pip download --no-deps --no-binary :all: --progress-bar off \
    --dest "$tmp" "llama-cpp-python==$VERSION" >&2 ||
    { rm -rf "$tmp"; log "pip download failed: is the package index reachable?"; exit 1; }
  mv "$tmp"/llama_cpp_python-$VERSION.tar.gz "$SDIST"
  rm -rf "$tmp"
fi
echo "$SHA256  $SDIST" | sha256sum -c --quiet - || { log "sha256 mismatch: $SDIST"; exit 1; }
rm -rf "$DIR/src" "$DIR/build"
mkdir -p "$DIR/src"
tar -xzf "$SDIST" -C "$DIR/src"
SRC=$DIR/src/llama_cpp_python-$VERSION/vendor/llama.cpp
log "configuring $SRC"
cmake -S "$SRC" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >&2
log "building llama-quantize"
cmake --build "$DIR/build" --target llama-quantize -j "$(nproc)" >&2
[ -x "$BIN" ] || { log "no $BIN after the build"; exit 1; }
echo "$BIN"
