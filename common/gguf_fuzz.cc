// libFuzzer target: GgufFile::FromBuffer on arbitrary bytes must return a status, never
// crash or read out of bounds; on success every tensor lies inside the buffer.
#include <cstddef>
#include <cstdint>

#include "common/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft::GgufLimits limits;
  limits.max_array_elements = 1 << 20;
  limits.max_string_bytes = 1 << 20;
  auto file = weft::GgufFile::FromBuffer(data, size, limits);
  if (!file.ok()) return 0;
  for (const weft::GgufTensor& t : (*file)->tensors()) {
    if (t.data < data || t.data + t.nbytes > data + size) __builtin_trap();
    volatile uint8_t sink = t.nbytes > 0 ? t.data[t.nbytes - 1] : 0;
    (void)sink;
  }
  (void)(*file)->Fingerprint();
  return 0;
}
