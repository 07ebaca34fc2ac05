// TokensHash: the agreement hash of a step's sampled tokens (FNV-1a over each token's
// seq_id and token_id, in result order). Every rank of a tensor-parallel replica sends
// it; the scheduler compares ranks' hashes with rank 0's (../shared/DESIGN.md, groups).
#ifndef WEFT_COMMON_TOKENS_HASH_H_
#define WEFT_COMMON_TOKENS_HASH_H_

#include <cstdint>

#include "weft/v1/worker.pb.h"

namespace weft {

uint64_t TokensHash(const weft::v1::StepResult& result);

}  // namespace weft

#endif  // WEFT_COMMON_TOKENS_HASH_H_
