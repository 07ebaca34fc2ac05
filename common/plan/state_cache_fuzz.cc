// libFuzzer target: a stream of StepPlans (each prefixed by a 2-byte length) applied to a
// StateCache. Must never crash; an applied plan never leaves a sequence whose computed
// positions exceed its tokens or blocks.
#include <cstddef>
#include <cstdint>

#include "common/plan/state_cache.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft::StateCache cache(/*block_size=*/4, /*num_blocks=*/16, /*vocab_size=*/64);
  cache.Reset(1);
  weft::StepBatch batch;
  size_t pos = 0;
  while (pos + 2 <= size) {
    const size_t len = data[pos] | (static_cast<size_t>(data[pos + 1]) << 8);
    pos += 2;
    if (len > size - pos) break;
    weft::v1::StepPlan plan;
    if (plan.ParseFromArray(data + pos, static_cast<int>(len)) && cache.Apply(plan, &batch).ok()) {
      for (const weft::ScheduledSequence& s : batch.sequences) {
        const weft::WorkerSequence& st = *s.state;
        if (st.num_computed_tokens > static_cast<int32_t>(st.tokens.size())) __builtin_trap();
        if (static_cast<int64_t>(st.block_ids.size()) * 4 < st.num_computed_tokens) __builtin_trap();
        if (s.sample) cache.AppendSampled(s.state, 1);
      }
    }
    pos += len;
  }
  return 0;
}
