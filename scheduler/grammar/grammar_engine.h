// GrammarEngine: structured output's grammar compiler for one model's vocabulary, built
// on XGrammar's C++ core (@xgrammar, third_party/xgrammar.bzl).
//
// What it does:
//   * GrammarVocab: the vocabulary as XGrammar sees it — each token's bytes in generated
//     text (Tokenizer::TokenBytes; control tokens are "", which XGrammar treats as never
//     allowed inside a grammar), the end-of-generation ids as its stop tokens, and the
//     logits width (bits in a mask; ids past the tokenizer's vocabulary are never allowed).
//   * Tool-call markers as the model's own tokens: a control token whose text is exactly a
//     marker of the model's tool-call format (ToolCallMarkerTokens, e.g. Mistral's
//     [TOOL_CALLS] and [ARGS]) stands for that text in tool-call grammars
//     (IsToolCallGrammar: structural tags) and only there; every other grammar keeps it
//     out, like every other control token. Tool-call grammars are compiled against a second
//     XGrammar vocabulary that differs from the first in those tokens' bytes only (built
//     only when the model has such tokens). The marker's spelling in ordinary tokens stays
//     allowed as well: a grammar over bytes cannot refuse one tokenization of a text, and
//     the text (and so the parsed call) is the same either way; a model trained on the
//     format puts its weight on the control token. Being bytes, a marker token is allowed
//     wherever its text is: also inside a call's JSON strings and, under tool_choice
//     "auto", in the free text (where the parser leaves a lone "[ARGS]" as text). A grammar
//     that pins markers to their positions needs XGrammar's token-level structural tags
//     ({"type": "token"}), with token ids in the tag (not done).
//   * CompileAsync(constraint) never blocks: it returns a GrammarFuture at once. A compiled
//     grammar is cached by GrammarConstraint::CacheKey() (LRU, bounded by count and by
//     XGrammar's reported bytes); identical constraints compiling at the same time share
//     one compile. Compiles run on the engine's own threads, never on the caller's.
//   * Bounds: a compile that has not finished compile_timeout after it was asked for is
//     refused (INVALID_ARGUMENT, "... did not compile within N s"); XGrammar cannot be
//     interrupted, so the stuck thread is replaced (at most max_abandoned_threads at a
//     time) and its constraint is remembered as refused (the same constraint is refused
//     at once next time, for as long as it stays in the cache). A constraint XGrammar
//     rejects is INVALID_ARGUMENT with XGrammar's reason. More than max_pending compiles
//     waiting is RESOURCE_EXHAUSTED.
//   * GrammarMatcherState: one sequence's position in its grammar: advanced by each
//     accepted token, and fills the allowed-token bitmask for the next step.
//
// Bitmask layout (the plan's, worker.proto): ceil(vocab_size / 32) little-endian uint32
// words; token t is allowed iff bit (t % 32) of word t / 32 is set.
//
// Thread-safety: GrammarEngine and GrammarFuture are thread-safe; a GrammarMatcherState
// is thread-compatible (the planning thread owns it). XGrammar's exceptions never leave
// this component.
#ifndef WEFT_SCHEDULER_GRAMMAR_GRAMMAR_ENGINE_H_
#define WEFT_SCHEDULER_GRAMMAR_GRAMMAR_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tool_call_format.h"
#include "scheduler/grammar/constraint.h"
#include "scheduler/grammar/sequence_grammar.h"

namespace weft {

class Tokenizer;

namespace grammar_internal {
struct EngineState;
struct Compiled;
struct FutureState;
}  // namespace grammar_internal

struct GrammarVocab {
  std::vector<std::string> token_bytes;  // index = token id; "" = never in a grammar
  std::vector<int32_t> stop_token_ids;   // end of generation: allowed once the grammar ends
  int32_t vocab_size = 0;                // logits width, >= token_bytes.size()
  // (id, text) of control tokens that tool-call grammars read as `text` (their
  // token_bytes entry stays ""); ids < token_bytes.size(), texts non-empty.
  std::vector<std::pair<int32_t, std::string>> tool_marker_tokens;
};

// The vocabulary of `tokenizer` for logits of `vocab_size` (>= tokenizer's) entries; its
// tool_marker_tokens are ToolCallMarkerTokens(tokenizer, tool_call_format) (the model's
// format, ChatTemplate::tool_call_format()).
GrammarVocab GrammarVocabFromTokenizer(const Tokenizer& tokenizer, int32_t vocab_size,
                                       ToolCallFormat tool_call_format);

// Number of uint32 words of a bitmask over `vocab_size` tokens.
inline int32_t BitmaskWords(int32_t vocab_size) { return (vocab_size + 31) / 32; }

struct GrammarEngineOptions {
  int32_t num_threads = 1;          // compile threads
  int32_t max_abandoned_threads = 2;  // stuck compiles tolerated before compiles queue
  int32_t max_pending = 64;         // compiles asked for and not started
  int32_t max_cached = 128;         // compiled grammars kept
  int64_t max_cached_bytes = 256 << 20;
  absl::Duration compile_timeout = absl::Seconds(10);
  // Tests only: runs on a compile thread just before each compile starts (a test holds a
  // compile back with it to make "the deadline passed first" happen every time).
  std::function<void()> before_compile_for_test;

  absl::Status Validate() const;
};

// A grammar compiled for the engine's vocabulary; shared by every sequence that uses it
// (NewSequence: a GrammarMatcherState at its start).
class CompiledConstraint : public SequenceGrammarFactory,
                           public std::enable_shared_from_this<CompiledConstraint> {
 public:
  explicit CompiledConstraint(std::shared_ptr<const grammar_internal::Compiled> impl)
      : impl_(std::move(impl)) {}
  const grammar_internal::Compiled& impl() const { return *impl_; }
  int64_t memory_bytes() const;
  std::unique_ptr<SequenceGrammar> NewSequence() const override;

 private:
  std::shared_ptr<const grammar_internal::Compiled> impl_;
};

// The result of one Compile call, polled by the planning thread.
class GrammarFuture {
 public:
  explicit GrammarFuture(std::shared_ptr<grammar_internal::FutureState> state)
      : state_(std::move(state)) {}
  // True once the compile finished or failed, or its deadline (given `now`) passed —
  // then result() holds the refusal. Cheap (one lock).
  bool Poll(absl::Time now = absl::Now());
  // Blocks until Poll would return true or `timeout` passes (tools and tests; the
  // planning thread polls). Returns Poll()'s answer.
  bool Wait(absl::Duration timeout);
  // Valid once Poll returned true.
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> result() const;
  // Runs `fn` once when the compile finishes or is refused (on the compile thread, or
  // now when it already has); not when only the deadline passes (Poll decides that).
  void OnDone(std::function<void()> fn);
  absl::Time deadline() const;

 private:
  std::shared_ptr<grammar_internal::FutureState> state_;
};

struct GrammarEngineStats {
  int64_t num_compiles = 0;      // finished XGrammar compiles (successful or not)
  double compile_seconds = 0.0;  // their total time
  double max_compile_seconds = 0.0;
  int64_t num_cache_hits = 0;
  int64_t num_refused = 0;       // INVALID_ARGUMENT or timeout
  int64_t num_timeouts = 0;
  int32_t num_cached = 0;
  int64_t cached_bytes = 0;
};

class GrammarEngine : public GrammarCompileService {
 public:
  static absl::StatusOr<std::unique_ptr<GrammarEngine>> Create(GrammarVocab vocab,
                                                               GrammarEngineOptions options);
  ~GrammarEngine() override;
  GrammarEngine(const GrammarEngine&) = delete;
  GrammarEngine& operator=(const GrammarEngine&) = delete;

  // `constraint` must pass CheckConstraint. Never blocks on a compile.
  GrammarFuture CompileAsync(const GrammarConstraint& constraint);

  // GrammarCompileService: CompileAsync() as a PendingGrammar.
  std::unique_ptr<PendingGrammar> Compile(const GrammarConstraint& constraint,
                                          std::function<void()> on_final) override;

  int32_t vocab_size() const;
  GrammarEngineStats stats() const;
  GrammarCompileTotals totals() const override;

 private:
  explicit GrammarEngine(std::shared_ptr<grammar_internal::EngineState> state);
  std::shared_ptr<grammar_internal::EngineState> state_;
};

// One sequence's matcher. Accept() each token the sequence generates, in order;
// FillNextTokenBitmask() before the step that samples its next token.
class GrammarMatcherState : public SequenceGrammar {
 public:
  explicit GrammarMatcherState(std::shared_ptr<const CompiledConstraint> grammar);
  ~GrammarMatcherState() override;
  GrammarMatcherState(GrammarMatcherState&&) noexcept;
  GrammarMatcherState& operator=(GrammarMatcherState&&) noexcept;

  // FailedPrecondition when the grammar does not allow `token` here (the worker applied
  // an older mask: a contract violation) or after the stop token.
  absl::Status Accept(int32_t token) override;
  // Writes BitmaskWords(vocab_size) words into `words`. Returns false when every token
  // is allowed (no mask needs to travel).
  bool FillNextTokenBitmask(uint32_t* words) override;
  int32_t vocab_size() const override;
  // The grammar is complete and a stop token was accepted.
  bool IsTerminated() const;
  // Tokens accepted so far.
  int64_t num_accepted() const { return num_accepted_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t num_accepted_ = 0;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_GRAMMAR_GRAMMAR_ENGINE_H_
