#!/usr/bin/env bash
# Rebuilds tests/testdata/ggml_quant_ref.bin (quantized tensors, their dequantization and
# dot products, made by llama.cpp's ggml; tests/testdata/README.md) from
# tools/refdata/ggml_quant_ref.cc, compiled outside the repository against a llama.cpp
# build (shared libraries) and its source tree (headers):
#
#   LLAMA_SRC=/work/ref/llama_cpp_python-0.3.36/vendor/llama.cpp \
#   LLAMA_BIN=/work/ref/llama-build/bin tools/refdata/make_quant_ref.sh
#
# llama.cpp build 0c1e570 as vendored by PyPI llama-cpp-python 0.3.36 (sdist sha256
# 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e), configured with
# CMake Release, BUILD_SHARED_LIBS=ON. The quantized bytes and the dequantized values
# come from ggml-base (portable C, no -march flags): the same on every x86-64 machine.
# The dot products come from ggml-cpu (built for the machine's ISA); the tests compare
# them within the activation-quantization tolerance only.
set -euo pipefail
cd "$(dirname "$0")/../.."
LLAMA_SRC=${LLAMA_SRC:-/work/ref/llama_cpp_python-0.3.36/vendor/llama.cpp}
LLAMA_BIN=${LLAMA_BIN:-/work/ref/llama-build/bin}
OUT=${OUT:-tests/testdata/ggml_quant_ref.bin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
g++ -O2 -std=c++17 -I"$LLAMA_SRC/ggml/include" tools/refdata/ggml_quant_ref.cc \
  -L"$LLAMA_BIN" -lggml-cpu -lggml-base -Wl,-rpath,"$LLAMA_BIN" -o "$tmp/ggml_quant_ref"
"$tmp/ggml_quant_ref" "$OUT"
echo "wrote $OUT ($(stat -c %s "$OUT") bytes, sha256 $(sha256sum "$OUT" | cut -d' ' -f1))"
