#!/usr/bin/env bash
# Builds llama.cpp's llama-quantize, and nothing else of llama.cpp, from the pinned PyPI
# sdist of llama-cpp-python 0.3.36 (it vendors llama.cpp build 0c1e570), outside the
# repository, cached under ~/.cache/weft/llama-quantize-0.3.36 (about 15-25 minutes on
# 2 cores the first time, nothing afterwards). Prints the binary's path on stdout.
#
#   tools/quant/build_llama_quantize.sh            # uses/fills the cache
#
# The sdist is the one tools/bootstrap.sh fetched and checked against its pinned sha256
# (the pin lives there): this script builds only from a tarball whose sha256 equals the
# one bootstrap recorded for it. GGML_NATIVE=OFF: the quantizer is ggml-base's portable C
# either way, so the files it writes do not depend on the machine (tools/quant/full.sh
# checks their sha256).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/lib.sh
VERSION=0.3.36
DIR=$WEFT_CACHE_DIR/llama-quantize-$VERSION
BIN=$DIR/build/bin/llama-quantize
log() { echo "build_llama_quantize: $*" >&2; }
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
SDIST=$WEFT_CACHE_DIR/sdist/llama_cpp_python-$VERSION.tar.gz
STAMP=$WEFT_CACHE_DIR/llama-cpp-python-$VERSION/.weft-sha256
[ -f "$SDIST" ] && [ -f "$STAMP" ] || { log "no checked $SDIST: run tools/bootstrap.sh"; exit 1; }
[ "$(sha256sum "$SDIST" | cut -d' ' -f1)" = "$(cat "$STAMP")" ] ||
  { log "$SDIST is not the sdist tools/bootstrap.sh checked: run tools/bootstrap.sh"; exit 1; }
mkdir -p "$DIR"
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
