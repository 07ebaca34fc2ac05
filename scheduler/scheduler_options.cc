#include "scheduler/scheduler_options.h"

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

absl::Status Positive(const char* name, int64_t v) {
  if (v > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, " must be > 0, got ", v));
}

}  // namespace

absl::Status SchedulerOptions::Validate() const {
  for (auto [name, v] : {std::pair<const char*, int64_t>{"block_size", block_size},
                         {"max_num_batched_tokens", max_num_batched_tokens},
                         {"max_num_seqs", max_num_seqs},
                         {"max_waiting", max_waiting}}) {
    if (absl::Status s = Positive(name, v); !s.ok()) return s;
  }
  if (!(admission_watermark >= 0 && admission_watermark < 1)) {
    return absl::InvalidArgumentError("admission_watermark must be in [0, 1)");
  }
  if (grammar_mask_threads < 0 || grammar_mask_threads > 64 ||
      grammar_mask_wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("grammar_mask_threads in [0, 64], grammar_mask_wait >= 0");
  }
  if (max_preemptions_per_sequence < 0 || max_retries < 0) {
    return absl::InvalidArgumentError("max_preemptions, max_retries >= 0");
  }
  if (absl::Status s = limits.Validate(); !s.ok()) return s;
  if (limits.max_n > max_num_seqs) {
    // n above what one replica runs at once is refused with the real limit.
    return absl::InvalidArgumentError(absl::StrCat("max_n (", limits.max_n,
                                                   ") must be <= max_num_seqs (", max_num_seqs,
                                                   ")"));
  }
  if (max_steps_in_flight < 1 || max_steps_in_flight > 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_steps_in_flight must be in [1, 8], got ", max_steps_in_flight));
  }
  for (int32_t t : eos_token_ids) {
    if (t < 0 || t >= limits.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("eos token id ", t, " out of range"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReplicaOptions::Validate() const {
  if (absl::Status s = Positive("num_blocks", num_blocks); !s.ok()) return s;
  if (max_steps_in_flight < 0 || max_steps_in_flight > 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_steps_in_flight must be in [0, 8], got ", max_steps_in_flight));
  }
  return Positive("block_size", block_size);
}

}  // namespace weft
