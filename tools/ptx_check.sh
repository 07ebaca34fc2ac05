#!/usr/bin/env bash
# tools/ptx_check.sh BINARY [ARCH] — checks that BINARY (or a static archive) embeds PTX for
# compute_ARCH (default 90, the newest architecture third_party/cuda.bzl builds) beside its
# SASS: one PTX entry for every sm_ARCH cubin, so a GPU newer than any we compile for can
# JIT-compile every kernel. Prints the counts; exit 0 when they match and are > 0.
#
# cuobjdump is not in the nvcc-only toolkit CI installs: this script takes it from
# $WEFT_CUOBJDUMP, PATH or /usr/local/cuda/bin, else fetches PyPI's nvidia-cuda-cuobjdump
# wheel (sha256-pinned) once into ~/.cache/weft/tools.
set -euo pipefail

[ $# -ge 1 ] || { sed -n '2,9p' "$0"; exit 2; }
binary=$1
arch=${2:-90}
[ -f "$binary" ] || { echo "ptx_check: $binary: no such file" >&2; exit 2; }

CUOBJDUMP_VERSION=13.2.51
CUOBJDUMP_WHEEL=nvidia_cuda_cuobjdump-$CUOBJDUMP_VERSION-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
CUOBJDUMP_SHA=95c69d3ddf0c2c1f535ec44c3433a66aeee19f588d9d22f73356e20b25f12b50

find_cuobjdump() {
  if [ -n "${WEFT_CUOBJDUMP:-}" ]; then echo "$WEFT_CUOBJDUMP"; return; fi
  if command -v cuobjdump >/dev/null 2>&1; then command -v cuobjdump; return; fi
  if [ -x /usr/local/cuda/bin/cuobjdump ]; then echo /usr/local/cuda/bin/cuobjdump; return; fi
  local dir=${WEFT_CACHE_DIR:-$HOME/.cache/weft}/tools/cuobjdump-$CUOBJDUMP_VERSION
  if [ ! -x "$dir/cuobjdump" ]; then
    local tmp
    tmp=$(mktemp -d)
    echo "ptx_check: fetching cuobjdump $CUOBJDUMP_VERSION (PyPI nvidia-cuda-cuobjdump, 0.3 MB)" >&2
    python3 -m pip download --no-deps --progress-bar off --dest "$tmp" \
      "nvidia-cuda-cuobjdump==$CUOBJDUMP_VERSION" >&2 ||
      { rm -rf "$tmp"; echo "ptx_check: pip download failed: is the package index reachable?" >&2; exit 1; }
    local got
    got=$(sha256sum "$tmp/$CUOBJDUMP_WHEEL" | cut -d' ' -f1)
    if [ "$got" != "$CUOBJDUMP_SHA" ]; then
      rm -rf "$tmp"
      echo "ptx_check: $CUOBJDUMP_WHEEL: sha256 $got, expected $CUOBJDUMP_SHA" >&2
      exit 1
    fi
    unzip -q -j -o "$tmp/$CUOBJDUMP_WHEEL" nvidia/cu13/bin/cuobjdump -d "$tmp/out"
    mkdir -p "$dir" && chmod +x "$tmp/out/cuobjdump" && mv "$tmp/out/cuobjdump" "$dir/"
    rm -rf "$tmp"
  fi
  echo "$dir/cuobjdump"
}

cuobjdump=$(find_cuobjdump)
ptx=$("$cuobjdump" --list-ptx "$binary" 2>&1 | grep -c "\.sm_$arch\.ptx" || true)
elf=$("$cuobjdump" --list-elf "$binary" 2>&1 | grep -c "\.sm_$arch\.cubin" || true)
echo "ptx_check: $(basename "$binary"): $elf sm_$arch cubins, $ptx compute_$arch PTX"
if [ "$elf" -eq 0 ] || [ "$ptx" -ne "$elf" ]; then
  echo "ptx_check: FAILED: every sm_$arch cubin needs its PTX beside it" >&2
  exit 1
fi
