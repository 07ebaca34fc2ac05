#include "common/tokens_hash.h"

namespace weft {

uint64_t TokensHash(const weft::v1::StepResult& result) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (const auto& t : result.tokens()) {
    mix(static_cast<uint64_t>(t.seq_id()));
    mix(static_cast<uint64_t>(static_cast<uint32_t>(t.token_id())));
  }
  return h;
}

}  // namespace weft
