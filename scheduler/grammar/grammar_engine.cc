#include "scheduler/grammar/grammar_engine.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <exception>
#include <list>
#include <thread>
#include <unordered_map>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/mutex.h"
#include "common/tokenizer.h"
#include "glog/logging.h"
#include "scheduler/grammar/compiled.h"
#include "scheduler/grammar/string_length_lowering.h"
#include "xgrammar/xgrammar.h"

namespace weft {
namespace grammar_internal {

struct FutureState {
  Mutex mu;
  CondVar cv;  // signalled when done
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::shared_ptr<const CompiledConstraint> grammar ABSL_GUARDED_BY(mu);
  std::vector<std::function<void()>> on_done ABSL_GUARDED_BY(mu);  // run once, when done
  // Guarded by the engine's mu (taken before a future's mu, never after):
  bool compiling = false;  // a thread is in XGrammar for it
  bool abandoned = false;  // past its deadline there: its thread was replaced
  absl::Time deadline;                        // set before the future is shared
  uint64_t key = 0;
  std::weak_ptr<EngineState> engine;
};

// One cache entry: a compiled grammar, or a refusal remembered.
struct CacheEntry {
  uint64_t key = 0;
  std::shared_ptr<const CompiledConstraint> grammar;  // null: refused
  absl::Status refusal;
  int64_t bytes = 0;
};

struct Job {
  GrammarConstraint constraint;
  std::shared_ptr<FutureState> future;
};

struct EngineState : std::enable_shared_from_this<EngineState> {
  EngineState(GrammarEngineOptions o, xgrammar::TokenizerInfo info,
              xgrammar::TokenizerInfo tool_info, int32_t vocab)
      : options(std::move(o)), tokenizer_info(info),
        compiler(info, /*max_threads=*/1, /*cache_enabled=*/false), tool_info(tool_info),
        tool_compiler(tool_info, /*max_threads=*/1, /*cache_enabled=*/false),
        vocab_size(vocab) {}

  const GrammarEngineOptions options;
  const xgrammar::TokenizerInfo tokenizer_info;
  xgrammar::GrammarCompiler compiler;  // thread-safe; its own cache is off (ours is below)
  // Tool-call grammars' vocabulary: tokenizer_info plus the marker tokens' bytes (the same
  // object when the vocabulary has none).
  const xgrammar::TokenizerInfo tool_info;
  xgrammar::GrammarCompiler tool_compiler;
  const int32_t vocab_size;

  Mutex mu;
  CondVar cv;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  int32_t num_threads ABSL_GUARDED_BY(mu) = 0;       // alive
  int32_t target_threads ABSL_GUARDED_BY(mu) = 0;    // options.num_threads + abandoned
  int32_t num_abandoned ABSL_GUARDED_BY(mu) = 0;
  std::deque<Job> queue ABSL_GUARDED_BY(mu);
  std::unordered_map<uint64_t, std::shared_ptr<FutureState>> in_flight ABSL_GUARDED_BY(mu);
  std::list<CacheEntry> lru ABSL_GUARDED_BY(mu);  // most recent first
  std::unordered_map<uint64_t, std::list<CacheEntry>::iterator> index ABSL_GUARDED_BY(mu);
  GrammarEngineStats stats ABSL_GUARDED_BY(mu);

  void StartThread() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ++num_threads;
    // Detached: a thread stuck in XGrammar must not hold up the engine's destruction;
    // it owns a reference to this state.
    std::thread([self = shared_from_this()] { self->Run(); }).detach();
  }

  void Run() ABSL_LOCKS_EXCLUDED(mu);
  void Finish(const std::shared_ptr<FutureState>& f, absl::Status status,
              std::shared_ptr<const CompiledConstraint> grammar, double seconds)
      ABSL_LOCKS_EXCLUDED(mu);
  void Settle(const std::shared_ptr<FutureState>& f, absl::Status status,
              std::shared_ptr<const CompiledConstraint> grammar, double seconds,
              std::vector<std::function<void()>>* callbacks) ABSL_LOCKS_EXCLUDED(mu);
  void Insert(CacheEntry entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void OnTimeout(const std::shared_ptr<FutureState>& f) ABSL_LOCKS_EXCLUDED(mu);
};

namespace {

// `s` as an EBNF string literal (XGrammar's escapes).
std::string EbnfLiteral(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// `g` (built from `lowered`) with the marker regexes of its length-bounded strings
// replaced: one automaton each that accepts JSON's escapes (string_length_lowering.h).
xgrammar::Grammar WithBoundedStrings(xgrammar::Grammar g, const LoweredSchema& lowered) {
  if (lowered.num_lowered == 0) return g;
  return xgrammar::Grammar::FromEBNF(ExpandBoundedStrings(g.ToString()), "root");
}

// A JSON schema's grammar, its length-bounded strings as above.
xgrammar::Grammar JsonSchemaGrammar(const std::string& schema, bool any_whitespace) {
  const LoweredSchema lowered = LowerStringLengths(schema);
  return WithBoundedStrings(
      xgrammar::Grammar::FromJSONSchema(lowered.schema, any_whitespace, std::nullopt,
                                        std::nullopt, /*strict_mode=*/true),
      lowered);
}

// A structural tag's grammar (tool calls), its schemas' bounded strings as above; throws
// XGrammar's error for a tag it refuses (GrammarCompiler::CompileStructuralTag's contract).
xgrammar::Grammar StructuralTagGrammar(const std::string& tag,
                                       const xgrammar::TokenizerInfo& info) {
  const LoweredSchema lowered = LowerStructuralTagStrings(tag);
  auto result = xgrammar::Grammar::FromStructuralTag(lowered.schema, info);
  if (!std::holds_alternative<xgrammar::Grammar>(result)) {
    std::visit([](const auto& e) { throw e; }, std::get<1>(result));
  }
  return WithBoundedStrings(std::get<xgrammar::Grammar>(std::move(result)), lowered);
}

xgrammar::CompiledGrammar CompileWith(xgrammar::GrammarCompiler& compiler,
                                      const xgrammar::TokenizerInfo& info,
                                      const GrammarConstraint& c) {
  using Kind = GrammarConstraint::Kind;
  // One fixed layout, Python json.dumps's (", " and ": ", no newlines): a small model
  // given "any whitespace" can emit blanks forever and never close the value.
  constexpr bool kAnyWhitespace = false;
  switch (c.kind) {
    case Kind::kJsonSchema:
      // Length-bounded strings as one automaton each: XGrammar's own lowering costs ms per
      // mask (string_length_lowering.h).
      return compiler.CompileGrammar(JsonSchemaGrammar(c.source, kAnyWhitespace));
    case Kind::kJsonObject:
      // Not strict: any properties (strict mode would allow only "{}").
      return compiler.CompileJSONSchema(R"({"type":"object"})", kAnyWhitespace, std::nullopt,
                                        std::nullopt, /*strict_mode=*/false);
    case Kind::kRegex:
      return compiler.CompileRegex(c.source);
    case Kind::kEbnf:
      return compiler.CompileGrammar(c.source, "root");
    case Kind::kChoice: {
      std::string ebnf = "root ::= ";
      for (size_t i = 0; i < c.choices.size(); ++i) {
        if (i > 0) ebnf += " | ";
        ebnf += EbnfLiteral(c.choices[i]);
      }
      return compiler.CompileGrammar(ebnf, "root");
    }
    case Kind::kStructuralTag:
      return compiler.CompileGrammar(StructuralTagGrammar(c.source, info));
  }
  throw std::invalid_argument("unknown constraint kind");
}

absl::Status Refusal(const GrammarConstraint& c, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(ConstraintKindName(c.kind), ": does not compile: ", why));
}

}  // namespace

void EngineState::Run() {
  for (;;) {
    Job job;
    {
      MutexLock lock(&mu);
      while (!stopping && queue.empty() && num_threads <= target_threads) cv.Wait(&mu);
      if (stopping || num_threads > target_threads) {
        --num_threads;  // shutting down, or a replaced thread that came back
        return;
      }
      job = std::move(queue.front());
      queue.pop_front();
      MutexLock f(&job.future->mu);
      if (job.future->done) continue;  // timed out while queued
      job.future->compiling = true;
    }
    if (options.before_compile_for_test) options.before_compile_for_test();
    const absl::Time start = absl::Now();
    absl::Status status;
    std::shared_ptr<const CompiledConstraint> grammar;
    try {
      auto impl = std::make_shared<const Compiled>(
          IsToolCallGrammar(job.constraint)
              ? CompileWith(tool_compiler, tool_info, job.constraint)
              : CompileWith(compiler, tokenizer_info, job.constraint));
      grammar = std::make_shared<const CompiledConstraint>(std::move(impl));
    } catch (const std::exception& e) {
      status = Refusal(job.constraint, e.what());
    } catch (...) {
      status = Refusal(job.constraint, "unknown error");
    }
    Finish(job.future, std::move(status), std::move(grammar),
           absl::ToDoubleSeconds(absl::Now() - start));
  }
}

void EngineState::Finish(const std::shared_ptr<FutureState>& f, absl::Status status,
                         std::shared_ptr<const CompiledConstraint> grammar, double seconds) {
  std::vector<std::function<void()>> callbacks;
  Settle(f, std::move(status), std::move(grammar), seconds, &callbacks);
  for (auto& fn : callbacks) fn();  // outside every lock
}

void EngineState::Settle(const std::shared_ptr<FutureState>& f, absl::Status status,
                         std::shared_ptr<const CompiledConstraint> grammar, double seconds,
                         std::vector<std::function<void()>>* callbacks) {
  // The cache and the statistics first, then the future (waiters see both updated).
  MutexLock lock(&mu);
  ++stats.num_compiles;
  stats.compile_seconds += seconds;
  stats.max_compile_seconds = std::max(stats.max_compile_seconds, seconds);
  f->compiling = false;
  MutexLock fl(&f->mu);
  if (f->done) {
    // The deadline passed first: the refusal cached by OnTimeout stays. If this thread
    // was replaced meanwhile, one thread now leaves (Run sees more than wanted).
    if (f->abandoned) {
      --num_abandoned;
      --target_threads;
      cv.SignalAll();
    }
    return;
  }
  in_flight.erase(f->key);
  if (!status.ok()) ++stats.num_refused;
  CacheEntry e;
  e.key = f->key;
  e.grammar = grammar;
  e.refusal = status;
  e.bytes = grammar ? grammar->memory_bytes() : 0;
  Insert(std::move(e));
  f->done = true;
  f->status = std::move(status);
  f->grammar = std::move(grammar);
  callbacks->swap(f->on_done);
  f->cv.SignalAll();
}

void EngineState::Insert(CacheEntry entry) {
  if (auto it = index.find(entry.key); it != index.end()) {
    stats.cached_bytes -= it->second->bytes;
    lru.erase(it->second);
    index.erase(it);
  }
  stats.cached_bytes += entry.bytes;
  lru.push_front(std::move(entry));
  index[lru.front().key] = lru.begin();
  while (!lru.empty() && (static_cast<int64_t>(lru.size()) > options.max_cached ||
                          stats.cached_bytes > options.max_cached_bytes)) {
    stats.cached_bytes -= lru.back().bytes;
    index.erase(lru.back().key);
    lru.pop_back();
  }
  stats.num_cached = static_cast<int32_t>(lru.size());
}

void EngineState::OnTimeout(const std::shared_ptr<FutureState>& f) {
  absl::Status refusal;
  {
    MutexLock lock(&f->mu);
    refusal = f->status;
  }
  MutexLock lock(&mu);
  ++stats.num_timeouts;
  ++stats.num_refused;
  in_flight.erase(f->key);
  CacheEntry e;
  e.key = f->key;
  e.refusal = refusal;
  Insert(std::move(e));
  if (f->compiling && !f->abandoned && num_abandoned < options.max_abandoned_threads &&
      !stopping) {
    f->abandoned = true;
    ++num_abandoned;
    ++target_threads;
    StartThread();
  }
}

}  // namespace grammar_internal

using grammar_internal::EngineState;
using grammar_internal::FutureState;
using grammar_internal::Job;

GrammarVocab GrammarVocabFromTokenizer(const Tokenizer& tokenizer, int32_t vocab_size,
                                       ToolCallFormat tool_call_format) {
  GrammarVocab v;
  v.vocab_size = std::max(vocab_size, tokenizer.vocab_size());
  v.token_bytes.resize(tokenizer.vocab_size());
  for (int32_t t = 0; t < tokenizer.vocab_size(); ++t) {
    if (!tokenizer.IsControl(t)) v.token_bytes[t] = std::string(tokenizer.TokenBytes(t));
  }
  v.stop_token_ids = tokenizer.eog_ids();
  v.tool_marker_tokens = ToolCallMarkerTokens(tokenizer, tool_call_format);
  return v;
}

absl::Status GrammarEngineOptions::Validate() const {
  if (num_threads < 1 || max_abandoned_threads < 0 || max_pending < 1 || max_cached < 1 ||
      max_cached_bytes < 1) {
    return absl::InvalidArgumentError(
        "grammar engine: num_threads, max_pending, max_cached, max_cached_bytes must be >= 1 "
        "and max_abandoned_threads >= 0");
  }
  if (compile_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("grammar engine: compile_timeout must be > 0");
  }
  return absl::OkStatus();
}

int64_t CompiledConstraint::memory_bytes() const {
  return static_cast<int64_t>(impl_->grammar.MemorySizeBytes());
}

bool GrammarFuture::Poll(absl::Time now) {
  {
    MutexLock lock(&state_->mu);
    if (state_->done) return true;
    if (now < state_->deadline) return false;
    state_->done = true;
    state_->status = absl::InvalidArgumentError(
        "grammar did not compile within the server's limit (the constraint is too complex)");
    state_->on_done.clear();  // the caller watches the deadline itself
  }
  if (auto engine = state_->engine.lock()) engine->OnTimeout(state_);
  return true;
}

bool GrammarFuture::Wait(absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  {
    MutexLock lock(&state_->mu);
    while (!state_->done && absl::Now() < until) {
      state_->cv.WaitWithTimeout(&state_->mu, std::min(until, state_->deadline) - absl::Now());
      if (absl::Now() >= state_->deadline) break;
    }
  }
  return Poll(absl::Now());
}

void GrammarFuture::OnDone(std::function<void()> fn) {
  if (!fn) return;
  {
    MutexLock lock(&state_->mu);
    if (!state_->done) {
      state_->on_done.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

absl::Time GrammarFuture::deadline() const { return state_->deadline; }

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> GrammarFuture::result() const {
  MutexLock lock(&state_->mu);
  CHECK(state_->done) << "GrammarFuture::result() before Poll() returned true";
  if (!state_->status.ok()) return state_->status;
  return state_->grammar;
}

absl::StatusOr<std::unique_ptr<GrammarEngine>> GrammarEngine::Create(
    GrammarVocab vocab, GrammarEngineOptions options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (vocab.vocab_size < static_cast<int32_t>(vocab.token_bytes.size()) ||
      vocab.token_bytes.empty()) {
    return absl::InvalidArgumentError("grammar engine: vocab_size below the vocabulary");
  }
  for (const auto& [id, text] : vocab.tool_marker_tokens) {
    if (id < 0 || id >= static_cast<int32_t>(vocab.token_bytes.size()) || text.empty()) {
      return absl::InvalidArgumentError("grammar engine: a tool marker token outside the vocabulary");
    }
  }
  std::shared_ptr<EngineState> state;
  try {
    xgrammar::TokenizerInfo info(vocab.token_bytes, xgrammar::VocabType::RAW, vocab.vocab_size,
                                 vocab.stop_token_ids, /*add_prefix_space=*/false);
    xgrammar::TokenizerInfo tool_info = info;
    if (!vocab.tool_marker_tokens.empty()) {
      std::vector<std::string> bytes = vocab.token_bytes;
      for (const auto& [id, text] : vocab.tool_marker_tokens) bytes[id] = text;
      tool_info = xgrammar::TokenizerInfo(bytes, xgrammar::VocabType::RAW, vocab.vocab_size,
                                          vocab.stop_token_ids, /*add_prefix_space=*/false);
    }
    state = std::make_shared<EngineState>(options, std::move(info), std::move(tool_info),
                                          vocab.vocab_size);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("grammar engine: ", e.what()));
  }
  {
    MutexLock lock(&state->mu);
    state->target_threads = options.num_threads;
    for (int32_t i = 0; i < options.num_threads; ++i) state->StartThread();
  }
  return std::unique_ptr<GrammarEngine>(new GrammarEngine(std::move(state)));
}

GrammarEngine::GrammarEngine(std::shared_ptr<EngineState> state) : state_(std::move(state)) {}

GrammarEngine::~GrammarEngine() {
  std::vector<std::function<void()>> callbacks;
  {
    MutexLock lock(&state_->mu);
    state_->stopping = true;
    for (Job& job : state_->queue) {
      MutexLock f(&job.future->mu);
      if (!job.future->done) {
        job.future->done = true;
        job.future->status = absl::UnavailableError("grammar engine shut down");
        for (auto& fn : job.future->on_done) callbacks.push_back(std::move(fn));
        job.future->on_done.clear();
      }
    }
    state_->queue.clear();
    state_->cv.SignalAll();
  }
  for (auto& fn : callbacks) fn();
}

namespace {

class PendingCompile : public PendingGrammar {
 public:
  explicit PendingCompile(GrammarFuture f) : f_(std::move(f)) {}
  bool Poll(absl::Time now) override { return f_.Poll(now); }
  absl::Time deadline() const override { return f_.deadline(); }
  absl::StatusOr<std::shared_ptr<const SequenceGrammarFactory>> result() const override {
    auto r = f_.result();
    if (!r.ok()) return r.status();
    return std::shared_ptr<const SequenceGrammarFactory>(*std::move(r));
  }

 private:
  GrammarFuture f_;
};

}  // namespace

std::unique_ptr<PendingGrammar> GrammarEngine::Compile(const GrammarConstraint& constraint,
                                                      std::function<void()> on_final) {
  GrammarFuture f = CompileAsync(constraint);
  f.OnDone(std::move(on_final));
  return std::make_unique<PendingCompile>(std::move(f));
}

GrammarFuture GrammarEngine::CompileAsync(const GrammarConstraint& constraint) {
  auto f = std::make_shared<FutureState>();
  f->key = constraint.CacheKey();
  f->deadline = absl::Now() + state_->options.compile_timeout;
  f->engine = state_;
  MutexLock lock(&state_->mu);
  if (auto it = state_->index.find(f->key); it != state_->index.end()) {
    state_->lru.splice(state_->lru.begin(), state_->lru, it->second);  // most recent
    ++state_->stats.num_cache_hits;
    MutexLock fl(&f->mu);
    f->done = true;
    f->grammar = it->second->grammar;
    f->status = it->second->refusal;
    return GrammarFuture(std::move(f));
  }
  if (auto it = state_->in_flight.find(f->key); it != state_->in_flight.end()) {
    return GrammarFuture(it->second);  // the same constraint is compiling: share it
  }
  if (static_cast<int32_t>(state_->queue.size()) >= state_->options.max_pending) {
    MutexLock fl(&f->mu);
    f->done = true;
    f->status = absl::ResourceExhaustedError("too many grammars waiting to compile");
    return GrammarFuture(std::move(f));
  }
  state_->in_flight[f->key] = f;
  state_->queue.push_back(Job{constraint, f});
  state_->cv.Signal();
  return GrammarFuture(std::move(f));
}

int32_t GrammarEngine::vocab_size() const { return state_->vocab_size; }

GrammarCompileTotals GrammarEngine::totals() const {
  const GrammarEngineStats s = stats();
  return {s.num_compiles, s.compile_seconds, s.num_refused, s.num_cache_hits};
}

GrammarEngineStats GrammarEngine::stats() const {
  MutexLock lock(&state_->mu);
  return state_->stats;
}

}  // namespace weft
