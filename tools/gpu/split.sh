#!/bin/bash
# Here, after ../shared/gpu/pack.sh: split the default model for tools/gpu/ab.sh's two device
# calls so that each call's whole working tree stays under the device's 64 MiB — the tracked
# files travel too (~7 MiB), which pack.sh's model.a (sized to fill 60 MiB beside the
# binaries) does not leave room for. Writes .gpu/ab-model.1 (carried with pack.tar.xz in the
# first call, kept by ab.sh in /tmp/weft-gpu) and .gpu/ab-model.2 (the second call), checked
# there against .gpu/model.sha256. Prints each call's size.
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
model=${WEFT_GPU_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ ! -f .gpu/pack.tar.xz ] || [ ! -f "$model" ]; then echo "split: run ../shared/gpu/pack.sh first (needs $model)"; exit 1; fi
MiB=1048576
# What travels besides the carried files: tracked and untracked-not-ignored files.
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s+=$1} END {print s+0}')
budget=$(( 64 * MiB - tree - MiB ))   # 1 MiB of margin (new files before the call, metadata)
small=$(( $(stat -L -c %s .gpu/env.sh) + 4096 ))
pack=$(stat -L -c %s .gpu/pack.tar.xz); size=$(stat -L -c %s "$model")
a=$(( (size - pack) / 2 ))   # both calls equally full: pack + part 1 = part 2
if [ $a -le 0 ] || [ $(( pack + a + small )) -gt $budget ] || [ $(( size - a + small )) -gt $budget ]; then
  echo "split: tree $tree + pack + model do not fit two calls of 64 MiB"; exit 1
fi
head -c $a "$model" > .gpu/ab-model.1; tail -c +$((a + 1)) "$model" > .gpu/ab-model.2
sha256sum "$model" | cut -d' ' -f1 > .gpu/model.sha256
echo "split: tree $((tree / 1024)) KiB; call 1 carries pack.tar.xz + ab-model.1 = $(( (pack + a) / 1024 )) KiB;" \
  "call 2 carries ab-model.2 = $(( (size - a) / 1024 )) KiB (limit $(( 64 * 1024 )) KiB with the tree)"
