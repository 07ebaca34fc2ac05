#!/bin/bash
# Here, after ../shared/gpu/pack.sh: re-pack its binaries and the default model for
# tools/gpu/ab.sh's three device calls, each call's whole working tree under the device's
# 64 MiB (the tracked files travel too, ~7 MiB). pack.sh's one pack (~34 MB: four binaries
# carry the paged-attention fatbin) and the 94 MiB model do not fit two calls, so:
#   .gpu/serve.1, .gpu/serve.2  halves of one blob: serve.tar.xz (weft-worker, weft-scheduler,
#                               weft, weft-bench, their libraries) then the model; call 1
#                               carries serve.1 (ab.sh keeps it in /tmp/weft-gpu), call 2
#                               serve.2 and .gpu/serve.sums, and runs the serving part
#   .gpu/serve.sums             the pack's size and both parts' sha256
#   .gpu/kernels.tar.xz         the gpu-tagged tests and the two kernel benchmarks with the
#                               libraries: call 3 (tests, attn, qgemm) needs nothing else
# Prints each call's size.
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
model=${WEFT_GPU_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ ! -f .gpu/pack.tar.xz ] || [ ! -f "$model" ]; then echo "split: run ../shared/gpu/pack.sh first (needs $model)"; exit 1; fi
MiB=1048576
st=$(mktemp -d); trap 'rm -rf "$st"' EXIT
tar xJf .gpu/pack.tar.xz -C "$st"
serve=(weft-worker weft-scheduler weft weft-bench)
for b in "${serve[@]}"; do [ -x "$st/bin/$b" ] || { echo "split: the pack has no bin/$b"; exit 1; }; done
(cd "$st" && tar cf - "${serve[@]/#/bin/}" lib syslib | xz -T2 > "$root/.gpu/serve.tar.xz")
(cd "$st" && tar cf - $(cd "$st" && ls bin/*_test bin/*_benchmark) lib syslib | xz -T2 > "$root/.gpu/kernels.tar.xz")
pack=$(stat -c %s .gpu/serve.tar.xz); size=$(stat -L -c %s "$model")
half=$(( (pack + size + 1) / 2 ))
cat .gpu/serve.tar.xz "$model" > "$st/blob"
head -c $half "$st/blob" > .gpu/serve.1; tail -c +$((half + 1)) "$st/blob" > .gpu/serve.2
echo "$pack $(sha256sum .gpu/serve.tar.xz | cut -d' ' -f1) $(sha256sum "$model" | cut -d' ' -f1)" > .gpu/serve.sums
rm -f .gpu/serve.tar.xz .gpu/ab-model.1 .gpu/ab-model.2
# What travels besides the carried files: tracked and untracked-not-ignored files.
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s+=$1} END {print s+0}')
small=$(( $(stat -L -c %s .gpu/env.sh) + 4096 ))
fail=0
for c in "1 serve.1" "2 serve.2" "3 kernels.tar.xz"; do
  set -- $c; bytes=$(( tree + small + $(stat -c %s ".gpu/$2") ))
  echo "split: call $1 carries .gpu/$2: $(( bytes / 1024 )) KiB with the tree (limit $(( 64 * 1024 )) KiB)"
  [ $bytes -le $(( 63 * MiB )) ] || { echo "split: call $1 is over 63 MiB"; fail=1; }
done
exit $fail
