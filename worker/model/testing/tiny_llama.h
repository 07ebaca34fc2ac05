// BuildTinyLlama: writes a small random Llama GGUF in memory for tests (any matrix type,
// tied or untied head, a missing tensor, another architecture).
// Thread-safety: a pure function.
#ifndef WEFT_WORKER_MODEL_TESTING_TINY_LLAMA_H_
#define WEFT_WORKER_MODEL_TESTING_TINY_LLAMA_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/ggml_types.h"

namespace weft::testing {

struct TinyLlamaSpec {
  std::string architecture = "llama";
  int32_t num_layers = 2;
  int32_t hidden = 128;
  int32_t ffn = 96;
  int32_t num_heads = 4;
  int32_t num_kv_heads = 2;
  int32_t vocab = 80;
  int32_t context = 512;
  float rope_base = 10000.0f;
  bool tied = false;
  GgmlType matrix_type = GgmlType::kF32;  // every 2-D tensor, embeddings included
  // Per-tensor types (a mixed file, as llama-quantize writes): a 2-D tensor named .first,
  // or whose name ends with "." + .first (e.g. "attn_q.weight" for every layer's), is
  // stored as .second instead of matrix_type; the first match wins.
  std::vector<std::pair<std::string, GgmlType>> tensor_types;
  // Store every matrix as F32 holding the exact dequantized values of the matrix_type
  // version (same seed): a reference forward pass must then give the same bits.
  bool f32_twin = false;
  std::string omit_tensor;  // leave this tensor out
  uint32_t seed = 1;
};

std::vector<uint8_t> BuildTinyLlama(const TinyLlamaSpec& spec);

}  // namespace weft::testing

#endif  // WEFT_WORKER_MODEL_TESTING_TINY_LLAMA_H_
