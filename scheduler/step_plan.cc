#include "scheduler/step_plan.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft {
namespace {

std::string Ref(const SequenceRef& r) {
  return absl::StrCat(r.request_id.value(), ".", r.sample_index);
}

template <typename Blocks>
std::string JoinBlocks(const Blocks& blocks) {
  return absl::StrJoin(blocks, ",", [](std::string* out, BlockId b) {
    absl::StrAppend(out, b.value());
  });
}

}  // namespace

void StepPlan::Clear() {
  step_id = StepId();
  new_requests.clear();
  cached_requests.clear();
  finished_ids.clear();
  preempted_ids.clear();
  block_copies.clear();
  total_num_scheduled_tokens = 0;
  num_sampled = 0;
}

std::string StepPlan::DebugString() const {
  std::string s = absl::StrCat("step ", step_id.value(), " replica ", replica.value(), ": ",
                               total_num_scheduled_tokens, " tokens, ", num_sampled,
                               " sampled\n");
  for (const auto& n : new_requests) {
    absl::StrAppend(&s, "  new ", Ref(n.seq), " tokens=", n.token_ids.size(),
                    " computed=", n.num_computed_tokens, " sched=", n.num_scheduled_tokens,
                    n.do_sample ? " sample" : "", n.resumed ? " resumed" : "",
                    n.fork_parent_sample_index >= 0
                        ? absl::StrCat(" fork_of=", n.fork_parent_sample_index)
                        : "",
                    " blocks=[", JoinBlocks(n.block_ids), "]\n");
  }
  for (const auto& c : cached_requests) {
    absl::StrAppend(&s, "  cached ", Ref(c.seq), " computed=", c.num_computed_tokens,
                    " sched=", c.num_scheduled_tokens, c.do_sample ? " sample" : "",
                    " +blocks=[", JoinBlocks(c.new_block_ids), "]\n");
  }
  for (const auto& f : finished_ids) absl::StrAppend(&s, "  finished ", Ref(f), "\n");
  for (const auto& p : preempted_ids) absl::StrAppend(&s, "  preempted ", Ref(p), "\n");
  for (const auto& c : block_copies) {
    absl::StrAppend(&s, "  copy ", c.src.value(), "->", c.dst.value(), "\n");
  }
  return s;
}

}  // namespace weft
