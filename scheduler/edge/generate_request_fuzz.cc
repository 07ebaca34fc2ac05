// libFuzzer target: arbitrary bytes parsed as a GenerateRequest, built into a spec and
// validated as the frontend does. Must never crash; any accepted request respects the
// limits.
#include <cstddef>
#include <cstdint>

#include "scheduler/edge/generate_request.h"
#include "scheduler/edge/testing/byte_encoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft::v1::GenerateRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  weft::RequestLimits lim;
  lim.vocab_size = 300;
  lim.max_model_len = 512;
  weft::testing::ByteEncoder encoder;
  encoder.chat = true;
  auto spec = weft::BuildSpec(req, lim, 1 << 20, encoder, [] { return 1u; });
  if (!spec.ok()) return 0;
  auto r = weft::ValidateRequest(*std::move(spec), lim);
  if (r.ok()) {
    const weft::RequestSpec& s = r->spec();
    const size_t total = s.prompt_token_ids.size() + static_cast<size_t>(s.stopping.max_tokens);
    if (s.prompt_token_ids.empty() || total > 512 || s.stopping.max_tokens < 1 || s.n < 1 ||
        s.n > lim.max_n) {
      __builtin_trap();
    }
    for (int32_t id : s.prompt_token_ids) {
      if (id < 0 || id >= 300) __builtin_trap();
    }
  }
  return 0;
}
