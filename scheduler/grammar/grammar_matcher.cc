// GrammarMatcherState (grammar_engine.h): one sequence's XGrammar matcher.
#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "scheduler/grammar/compiled.h"
#include "scheduler/grammar/grammar_engine.h"
#include "xgrammar/xgrammar.h"

namespace weft {

struct GrammarMatcherState::Impl {
  explicit Impl(const xgrammar::CompiledGrammar& g)
      : matcher(g), vocab_size(g.GetTokenizerInfo().GetVocabSize()) {}
  xgrammar::GrammarMatcher matcher;
  const int32_t vocab_size;
  std::shared_ptr<const CompiledConstraint> grammar;  // keeps it alive
};

GrammarMatcherState::GrammarMatcherState(std::shared_ptr<const CompiledConstraint> grammar)
    : impl_(std::make_unique<Impl>(grammar->impl().grammar)) {
  impl_->grammar = std::move(grammar);
}

GrammarMatcherState::~GrammarMatcherState() = default;
GrammarMatcherState::GrammarMatcherState(GrammarMatcherState&&) noexcept = default;
GrammarMatcherState& GrammarMatcherState::operator=(GrammarMatcherState&&) noexcept = default;

absl::Status GrammarMatcherState::Accept(int32_t token) {
  bool accepted = false;
  try {
    accepted = !impl_->matcher.IsTerminated() && impl_->matcher.AcceptToken(token);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("grammar matcher: ", e.what()));
  }
  if (!accepted) {
    return absl::FailedPreconditionError(
        absl::StrCat("token ", token, " is not allowed by the grammar at output position ",
                     num_accepted_));
  }
  ++num_accepted_;
  return absl::OkStatus();
}

bool GrammarMatcherState::FillNextTokenBitmask(uint32_t* words) {
  int64_t shape[1] = {BitmaskWords(impl_->vocab_size)};
  DLTensor t;
  t.data = words;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  if (!impl_->matcher.IsTerminated()) {
    try {
      return impl_->matcher.FillNextTokenBitmask(&t);
    } catch (const std::exception& e) {
      LOG(ERROR) << "grammar matcher: FillNextTokenBitmask: " << e.what();
    }
  }
  // Past its end (or failed): only the stop tokens, so the sequence ends.
  std::fill(words, words + shape[0], 0u);
  for (int32_t s : impl_->matcher.GetStopTokenIds()) {
    if (s >= 0 && s < impl_->vocab_size) words[s / 32] |= 1u << (s % 32);
  }
  return true;
}

int32_t GrammarMatcherState::vocab_size() const { return impl_->vocab_size; }

std::unique_ptr<SequenceGrammar> CompiledConstraint::NewSequence() const {
  return std::make_unique<GrammarMatcherState>(shared_from_this());
}

bool GrammarMatcherState::IsTerminated() const { return impl_->matcher.IsTerminated(); }

}  // namespace weft
