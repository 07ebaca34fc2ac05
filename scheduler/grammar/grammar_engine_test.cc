#include "scheduler/grammar/grammar_engine.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "common/gguf.h"
#include "common/testing/model_path.h"
#include "common/tool_call_format.h"
#include "common/tokenizer.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using Kind = GrammarConstraint::Kind;

constexpr int32_t kEos = 1;
// How long a test waits for a compile before it fails (only a hang reaches it).
constexpr absl::Duration kHangGuard = absl::Minutes(5);

// Token 0: a control token (""), 1: EOS, then every printable ASCII character, then a
// few multi-character tokens; the logits are 5 wider than the vocabulary.
GrammarVocab TinyVocab() {
  GrammarVocab v;
  v.token_bytes = {"", ""};
  for (char c = 0x20; c < 0x7f; ++c) v.token_bytes.push_back(std::string(1, c));
  for (const char* t : {"yes", "no", "ye", "{\"", "\":", "true", "123"}) v.token_bytes.push_back(t);
  v.stop_token_ids = {kEos};
  v.vocab_size = static_cast<int32_t>(v.token_bytes.size()) + 5;
  return v;
}

int32_t Id(const GrammarVocab& v, const std::string& text) {
  auto it = std::find(v.token_bytes.begin() + 2, v.token_bytes.end(), text);
  return it == v.token_bytes.end() ? -1 : static_cast<int32_t>(it - v.token_bytes.begin());
}

std::vector<int32_t> Allowed(GrammarMatcherState& m, int32_t vocab_size) {
  std::vector<uint32_t> words(BitmaskWords(vocab_size), 0xdeadbeef);
  m.FillNextTokenBitmask(words.data());
  std::vector<int32_t> out;
  for (int32_t t = 0; t < vocab_size; ++t) {
    if (words[t / 32] >> (t % 32) & 1) out.push_back(t);
  }
  return out;
}

std::shared_ptr<const CompiledConstraint> MustCompile(GrammarEngine& e, const GrammarConstraint& c) {
  GrammarFuture f = e.CompileAsync(c);
  EXPECT_TRUE(f.Wait(kHangGuard));
  auto r = f.result();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : nullptr;
}

GrammarConstraint Make(Kind kind, std::string source) {
  GrammarConstraint c;
  c.kind = kind;
  c.source = std::move(source);
  return c;
}

// The engine's options in these tests: the production compile limit (10 s) would be a
// wall-clock assertion here (a model vocabulary's schema took 2 s on a loaded 2-core
// machine, and Gemma 3's is 5x larger); a compile that runs past its deadline is
// DeadlinePassedIsInvalidArgumentAndTheEngineGoesOn's case, held there by a seam.
GrammarEngineOptions TestOptions() {
  GrammarEngineOptions o;
  o.compile_timeout = absl::Minutes(10);
  return o;
}

class GrammarEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    vocab_ = TinyVocab();
    auto e = GrammarEngine::Create(vocab_, options_);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = std::move(*e);
  }
  GrammarVocab vocab_;
  GrammarEngineOptions options_ = TestOptions();
  std::unique_ptr<GrammarEngine> engine_;
};

TEST_F(GrammarEngineTest, ChoiceAllowsExactlyTheChoicesThenOnlyStop) {
  GrammarConstraint c;
  c.kind = Kind::kChoice;
  c.choices = {"yes", "no"};
  auto g = MustCompile(*engine_, c);
  ASSERT_NE(g, nullptr);
  GrammarMatcherState m(g);
  EXPECT_EQ(Allowed(m, vocab_.vocab_size),
            (std::vector<int32_t>{Id(vocab_, "n"), Id(vocab_, "y"), Id(vocab_, "yes"),
                                  Id(vocab_, "no"), Id(vocab_, "ye")}));
  ASSERT_TRUE(m.Accept(Id(vocab_, "ye")).ok());
  EXPECT_EQ(Allowed(m, vocab_.vocab_size), std::vector<int32_t>{Id(vocab_, "s")});
  EXPECT_EQ(m.Accept(Id(vocab_, "n")).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(m.Accept(Id(vocab_, "s")).ok());
  // Complete: only the stop token; the padding past the vocabulary never.
  EXPECT_EQ(Allowed(m, vocab_.vocab_size), std::vector<int32_t>{kEos});
  EXPECT_FALSE(m.IsTerminated());
  ASSERT_TRUE(m.Accept(kEos).ok());
  EXPECT_TRUE(m.IsTerminated());
  EXPECT_FALSE(m.Accept(Id(vocab_, "y")).ok());
  EXPECT_EQ(m.num_accepted(), 3);
}

TEST_F(GrammarEngineTest, RegexBoundsTheOutput) {
  auto g = MustCompile(*engine_, Make(Kind::kRegex, "[0-9]{2,3}"));
  ASSERT_NE(g, nullptr);
  GrammarMatcherState m(g);
  std::vector<int32_t> digits;
  for (char c = '0'; c <= '9'; ++c) digits.push_back(Id(vocab_, std::string(1, c)));
  std::vector<int32_t> first = digits;
  first.push_back(Id(vocab_, "123"));
  std::sort(first.begin(), first.end());
  EXPECT_EQ(Allowed(m, vocab_.vocab_size), first);
  ASSERT_TRUE(m.Accept(Id(vocab_, "4")).ok());
  ASSERT_TRUE(m.Accept(Id(vocab_, "2")).ok());
  std::vector<int32_t> third = digits;
  third.insert(third.begin(), kEos);  // two digits may end, or take a third
  EXPECT_EQ(Allowed(m, vocab_.vocab_size), third);
  ASSERT_TRUE(m.Accept(Id(vocab_, "7")).ok());
  EXPECT_EQ(Allowed(m, vocab_.vocab_size), std::vector<int32_t>{kEos});
}

TEST_F(GrammarEngineTest, JsonSchemaWalksAValidDocument) {
  auto g = MustCompile(*engine_, Make(Kind::kJsonSchema,
                                      R"({"type":"object","properties":{"ok":{"type":"boolean"}},)"
                                      R"("required":["ok"]})"));
  ASSERT_NE(g, nullptr);
  GrammarMatcherState m(g);
  // XGrammar's compact form, as Python's json.dumps writes it: {"ok": true}
  for (const char* t : {"{\"", "o", "k", "\":", " ", "true", "}"}) {
    ASSERT_TRUE(m.Accept(Id(vocab_, t)).ok()) << t;
  }
  EXPECT_EQ(Allowed(m, vocab_.vocab_size), std::vector<int32_t>{kEos});
}

// maxLength counts code points (a two-byte character is one), the string closes at its
// bound, and a raw control character is never allowed inside it (string_length_lowering.h
// turns the bound into a pattern; this is the language the schema asks for either way).
TEST(GrammarEngineStringTest, MaxLengthCountsCodePointsAndClosesAtTheBound) {
  GrammarVocab v = TinyVocab();
  v.token_bytes.push_back("\xc3\xa9");  // é
  v.token_bytes.push_back("\t");
  v.vocab_size = static_cast<int32_t>(v.token_bytes.size());
  auto e = GrammarEngine::Create(v, TestOptions());
  ASSERT_TRUE(e.ok()) << e.status();
  auto g = MustCompile(**e, Make(Kind::kJsonSchema,
                                 R"({"type":"object","properties":{"s":{"type":"string",)"
                                 R"("minLength":1,"maxLength":3}},"required":["s"]})"));
  ASSERT_NE(g, nullptr);
  const int32_t e_acute = v.vocab_size - 2, tab = v.vocab_size - 1, quote = Id(v, "\"");
  GrammarMatcherState m(g);
  for (const char* t : {"{\"", "s", "\":", " ", "\""}) ASSERT_TRUE(m.Accept(Id(v, t)).ok()) << t;
  std::vector<int32_t> first = Allowed(m, v.vocab_size);
  EXPECT_FALSE(std::count(first.begin(), first.end(), quote)) << "minLength 1";
  EXPECT_FALSE(std::count(first.begin(), first.end(), tab)) << "raw control character";
  EXPECT_TRUE(std::count(first.begin(), first.end(), e_acute));
  ASSERT_TRUE(m.Accept(e_acute).ok());
  ASSERT_TRUE(m.Accept(e_acute).ok());
  ASSERT_TRUE(m.Accept(Id(v, "a")).ok());
  EXPECT_EQ(Allowed(m, v.vocab_size), std::vector<int32_t>{quote});  // three code points
  ASSERT_TRUE(m.Accept(quote).ok());
  ASSERT_TRUE(m.Accept(Id(v, "}")).ok());
  EXPECT_EQ(Allowed(m, v.vocab_size), std::vector<int32_t>{kEos});
}

// Bounded strings go through XGrammar's printed grammar (string_length_lowering.h): every
// construct a schema can have beside them survives the round trip and still compiles.
TEST_F(GrammarEngineTest, SchemasWithBoundedStringsAndEveryOtherConstructCompile) {
  const std::string b = R"({"type":"string","maxLength":4})";
  for (const std::string& rest : {
           std::string(R"({"type":"integer","minimum":-5,"maximum":500})"),
           std::string(R"({"type":"number","minimum":0.5,"exclusiveMaximum":9})"),
           std::string(R"({"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":3})"),
           std::string(R"({"anyOf":[{"type":"null"},{"type":"string","pattern":"^a\"b$"}]})"),
           std::string(R"({"enum":["x\"y","\u00e9",1,null]})"),
           std::string(R"({"const":"tab\there"})"),
           std::string(R"({"type":"string","format":"date"})"),
           std::string(R"({"type":"string","minLength":200})"),
           std::string(R"({"type":"object","additionalProperties":{"type":"integer"}})"),
           std::string(R"({"$ref":"#/$defs/n"})"),
           std::string(R"({"type":"array","prefixItems":[{"type":"string","maxLength":2}]})")}) {
    const std::string schema =
        R"({"type":"object","$defs":{"n":{"type":"object","properties":{"v":)" + b +
        R"(,"next":{"anyOf":[{"$ref":"#/$defs/n"},{"type":"null"}]}}}},)"
        R"("properties":{"b":)" + b + R"(,"r":)" + rest + R"(},"required":["b","r"]})";
    GrammarFuture f = engine_->CompileAsync(Make(Kind::kJsonSchema, schema));
    ASSERT_TRUE(f.Wait(kHangGuard));
    EXPECT_TRUE(f.result().ok()) << schema << ": " << f.result().status();
  }
}

TEST_F(GrammarEngineTest, StructuralTagHoldsATaggedCallToItsSchema) {
  // A tool call: the tag's begin and end are fixed, its content follows the schema.
  auto g = MustCompile(*engine_, Make(Kind::kStructuralTag, R"({"type": "structural_tag",)"
      R"( "format": {"type": "tag", "begin": "<c>", "end": "</c>", "content":)"
      R"( {"type": "json_schema", "json_schema": {"type": "integer"}}}})"));
  ASSERT_NE(g, nullptr);
  GrammarMatcherState m(g);
  EXPECT_EQ(Allowed(m, vocab_.vocab_size), std::vector<int32_t>{Id(vocab_, "<")});
  EXPECT_EQ(m.Accept(Id(vocab_, "x")).code(), absl::StatusCode::kFailedPrecondition);
  for (const char* t : {"<", "c", ">", "123"}) ASSERT_TRUE(m.Accept(Id(vocab_, t)).ok()) << t;
  EXPECT_EQ(m.Accept(Id(vocab_, "a")).code(), absl::StatusCode::kFailedPrecondition);
  for (const char* t : {"<", "/", "c", ">"}) ASSERT_TRUE(m.Accept(Id(vocab_, t)).ok()) << t;
  EXPECT_EQ(Allowed(m, vocab_.vocab_size), std::vector<int32_t>{kEos});
  // A malformed tag is refused, naming the kind.
  GrammarFuture f = engine_->CompileAsync(Make(Kind::kStructuralTag, R"({"type": "nope"})"));
  ASSERT_TRUE(f.Wait(kHangGuard));
  EXPECT_THAT(std::string(f.result().status().message()), ::testing::HasSubstr("structural_tag"));
}

// A vocabulary whose tool-call markers are control tokens (as Mistral's [TOOL_CALLS] and
// [ARGS] are): a tool-call grammar (structural tag) lets those tokens stand for their
// text, both where a call starts and at [ARGS]; another control token ([INST]) stays
// out; a JSON-schema grammar refuses the marker tokens even where their text would fit
// (inside a string). The ordinary-token spelling stays allowed (grammar_engine.h).
TEST(GrammarEngineToolMarkerTest, ControlTokenMarkersOnlyInToolCallGrammars) {
  GrammarVocab v = TinyVocab();
  const auto add_control = [&v] {  // a control token: no bytes in the vocabulary
    v.token_bytes.push_back("");
    return static_cast<int32_t>(v.token_bytes.size()) - 1;
  };
  const int32_t tool_calls = add_control();  // [TOOL_CALLS]
  const int32_t args = add_control();        // [ARGS]
  const int32_t inst = add_control();        // [INST]
  v.vocab_size = static_cast<int32_t>(v.token_bytes.size()) + 5;
  v.tool_marker_tokens = {{tool_calls, "[TOOL_CALLS]"}, {args, "[ARGS]"}};
  auto engine = GrammarEngine::Create(v, TestOptions());
  ASSERT_TRUE(engine.ok()) << engine.status();
  const ToolSchema tools[] = {{"f", R"({"type":"object","properties":{"a":{"type":"integer"}}})"}};
  auto tag = MustCompile(**engine, Make(Kind::kStructuralTag,
                                        ToolCallsStructuralTag(ToolCallFormat::kMistralArgs, tools,
                                                               ToolCallMode::kAuto, false)));
  ASSERT_NE(tag, nullptr);
  const auto allowed = [&v](GrammarMatcherState& m, int32_t t) {
    const std::vector<int32_t> a = Allowed(m, v.vocab_size);
    return std::find(a.begin(), a.end(), t) != a.end();
  };
  const auto accept = [&v](GrammarMatcherState& m, const std::string& text) {
    for (char c : text) ASSERT_TRUE(m.Accept(Id(v, std::string(1, c))).ok()) << text;
  };
  {  // Free text, then the call with both markers as control tokens.
    GrammarMatcherState m(tag);
    EXPECT_TRUE(allowed(m, tool_calls));
    EXPECT_FALSE(allowed(m, inst));
    accept(m, "Ok ");
    ASSERT_TRUE(m.Accept(tool_calls).ok());
    EXPECT_FALSE(allowed(m, tool_calls));
    accept(m, "f");
    EXPECT_TRUE(allowed(m, args));
    ASSERT_TRUE(m.Accept(args).ok());
    accept(m, R"({"a": 1})");
    EXPECT_EQ(Allowed(m, v.vocab_size), std::vector<int32_t>{kEos});
  }
  {  // The same call spelled in ordinary tokens is allowed too.
    GrammarMatcherState m(tag);
    accept(m, R"([TOOL_CALLS]f[ARGS]{"a": 1})");
    EXPECT_EQ(Allowed(m, v.vocab_size), std::vector<int32_t>{kEos});
  }
  // A JSON schema (compiled by the same engine): a string may hold "[TOOL_CALLS]" as
  // text, but never the control token, nor any other.
  auto json = MustCompile(**engine, Make(Kind::kJsonSchema,
                                         R"({"type":"object","properties":{"s":{"type":"string"}},)"
                                         R"("required":["s"]})"));
  ASSERT_NE(json, nullptr);
  GrammarMatcherState m(json);
  accept(m, R"({"s": ")");
  EXPECT_TRUE(allowed(m, Id(v, "[")));
  EXPECT_FALSE(allowed(m, tool_calls));
  EXPECT_FALSE(allowed(m, args));
  EXPECT_FALSE(allowed(m, inst));
  EXPECT_EQ(m.Accept(tool_calls).code(), absl::StatusCode::kFailedPrecondition);
}

// A marker token outside the vocabulary is refused when the engine is made.
TEST(GrammarEngineToolMarkerTest, MarkerOutsideTheVocabularyIsRefused) {
  GrammarVocab v = TinyVocab();
  v.tool_marker_tokens = {{static_cast<int32_t>(v.token_bytes.size()), "[TOOL_CALLS]"}};
  EXPECT_EQ(GrammarEngine::Create(v, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(GrammarEngineTest, InvalidSourceIsRefusedWithTheReasonAndRemembered) {
  GrammarFuture f = engine_->CompileAsync(Make(Kind::kEbnf, "root ::= missing_rule"));
  ASSERT_TRUE(f.Wait(kHangGuard));
  auto r = f.result();
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("grammar: does not compile"), std::string::npos)
      << r.status();
  const int64_t compiles = engine_->stats().num_compiles;
  GrammarFuture again = engine_->CompileAsync(Make(Kind::kEbnf, "root ::= missing_rule"));
  ASSERT_TRUE(again.Poll());  // at once, from the cache
  EXPECT_EQ(again.result().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->stats().num_compiles, compiles);
  EXPECT_EQ(engine_->stats().num_refused, 1);

  GrammarFuture bad_json = engine_->CompileAsync(Make(Kind::kJsonSchema, "{not json"));
  ASSERT_TRUE(bad_json.Wait(kHangGuard));
  EXPECT_EQ(bad_json.result().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(GrammarEngineTest, CacheHitsAndLruEviction) {
  engine_.reset();
  options_.max_cached = 2;
  SetUp();
  auto a = Make(Kind::kRegex, "a+"), b = Make(Kind::kRegex, "b+"), c = Make(Kind::kRegex, "c+");
  MustCompile(*engine_, a);
  MustCompile(*engine_, b);
  MustCompile(*engine_, a);  // hit: a is now the most recent
  EXPECT_EQ(engine_->stats().num_compiles, 2);
  EXPECT_EQ(engine_->stats().num_cache_hits, 1);
  MustCompile(*engine_, c);  // evicts b
  MustCompile(*engine_, a);  // still cached
  EXPECT_EQ(engine_->stats().num_compiles, 3);
  MustCompile(*engine_, b);  // compiled again
  EXPECT_EQ(engine_->stats().num_compiles, 4);
  EXPECT_EQ(engine_->stats().num_cached, 2);
}

TEST_F(GrammarEngineTest, DeadlinePassedIsInvalidArgumentAndTheEngineGoesOn) {
  // The first compile is held back until the deadline has been seen to pass (without the
  // hold a fast machine finished it before the poll: CI failed on that once).
  auto started = std::make_shared<absl::Notification>();
  auto release = std::make_shared<absl::Notification>();
  auto first = std::make_shared<std::atomic<bool>>(true);
  absl::Cleanup let_go = [release] {
    if (!release->HasBeenNotified()) release->Notify();
  };
  engine_.reset();
  options_.before_compile_for_test = [started, release, first] {
    if (!first->exchange(false)) return;
    started->Notify();
    release->WaitForNotification();
  };
  SetUp();
  GrammarFuture f = engine_->CompileAsync(Make(Kind::kRegex, "x{1,50}y"));
  ASSERT_TRUE(started->WaitForNotificationWithTimeout(kHangGuard));
  // As if the compile had run past its limit (the planning thread polls with its clock).
  ASSERT_TRUE(f.Poll(absl::InfiniteFuture()));
  std::move(let_go).Invoke();  // the held compile finishes late; its result is dropped
  auto r = f.result();
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("did not compile within"), std::string::npos);
  EXPECT_EQ(engine_->stats().num_timeouts, 1);
  // Refused at once next time; other constraints still compile.
  GrammarFuture again = engine_->CompileAsync(Make(Kind::kRegex, "x{1,50}y"));
  ASSERT_TRUE(again.Poll());
  EXPECT_FALSE(again.result().ok());
  EXPECT_NE(MustCompile(*engine_, Make(Kind::kRegex, "z")), nullptr);
  // The held compile ends (its thread is detached: wait, so that it does not outlive the
  // test) and its late result leaves the cached refusal alone.
  const absl::Time until = absl::Now() + kHangGuard;
  while (engine_->stats().num_compiles < 2 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(engine_->stats().num_compiles, 2);
  GrammarFuture third = engine_->CompileAsync(Make(Kind::kRegex, "x{1,50}y"));
  ASSERT_TRUE(third.Poll());
  EXPECT_FALSE(third.result().ok());
}

TEST_F(GrammarEngineTest, ConcurrentIdenticalCompilesShareOne) {
  auto c = Make(Kind::kJsonSchema, R"({"type":"array","items":{"type":"integer"},"maxItems":3})");
  std::vector<GrammarFuture> fs;
  for (int i = 0; i < 8; ++i) fs.push_back(engine_->CompileAsync(c));
  for (GrammarFuture& f : fs) {
    ASSERT_TRUE(f.Wait(kHangGuard));
    ASSERT_TRUE(f.result().ok());
  }
  EXPECT_EQ(engine_->stats().num_compiles, 1);
}

// Walks `target` through `m`'s masks, taking at each step the longest allowed token that
// continues it. Returns how many bytes were accepted (target.size(): all of it); adds the
// mask time and steps to the optional counters.
size_t Walk(GrammarMatcherState& m, const GrammarVocab& vocab, const std::string& target,
            absl::Duration* mask_time = nullptr, int* steps = nullptr) {
  std::vector<uint32_t> words(BitmaskWords(vocab.vocab_size));
  size_t pos = 0;
  while (pos < target.size()) {
    const absl::Time s = absl::Now();
    m.FillNextTokenBitmask(words.data());
    if (mask_time != nullptr) *mask_time += absl::Now() - s;
    if (steps != nullptr) ++*steps;
    int32_t best = -1;
    size_t best_len = 0;
    for (int32_t t = 0; t < static_cast<int32_t>(vocab.token_bytes.size()); ++t) {
      const std::string& b = vocab.token_bytes[t];
      if ((words[t / 32] >> (t % 32) & 1) && !b.empty() && b.size() > best_len &&
          target.compare(pos, b.size(), b) == 0) {
        best = t;
        best_len = b.size();
      }
    }
    if (best < 0 || !m.Accept(best).ok()) return pos;
    pos += best_len;
  }
  return pos;
}

// After a complete document: exactly the end-of-generation tokens are allowed.
void ExpectOnlyEog(GrammarMatcherState& m, const Tokenizer& tok, int32_t vocab_size) {
  std::vector<uint32_t> words(BitmaskWords(vocab_size));
  ASSERT_TRUE(m.FillNextTokenBitmask(words.data()));
  for (int32_t t = 0; t < vocab_size; ++t) {
    const bool allowed = words[t / 32] >> (t % 32) & 1;
    EXPECT_EQ(allowed, tok.IsEog(t)) << "token " << t;
  }
}

// The model whose vocabulary the model tests use: the default one, or with
// WEFT_GRAMMAR_MODEL=gemma3 (the manual target grammar_engine_gemma3_test, in test.sh's
// gemma3 phase) Gemma 3 270M's SentencePiece vocabulary of 262,144 tokens ("" = absent).
std::string ModelUnderTest() {
  const char* which = std::getenv("WEFT_GRAMMAR_MODEL");
  if (which != nullptr && std::string(which) == "gemma3") {
    return testing::FindModelFile("gemma-3-270m-q4_k_m.gguf");
  }
  return testing::FindModelFile();
}

#define WEFT_REQUIRE_MODEL_UNDER_TEST(var)                                                   \
  const std::string var = ModelUnderTest();                                                 \
  if (var.empty()) {                                                                        \
    GTEST_SKIP() << "model not found (tools/bootstrap.sh [--model gemma3-270m])";          \
  }

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path) {
  auto gguf = GgufFile::OpenMetadata(path);
  EXPECT_TRUE(gguf.ok()) << gguf.status();
  if (!gguf.ok()) return nullptr;
  auto tok = Tokenizer::FromGguf(**gguf);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

// A tool call's arguments (a structural tag's schema) get the same bounded strings as a
// response_format schema: escapes count as one character, the bound holds.
TEST(GrammarEngineStringTest, StructuralTagSchemaBoundedStringAcceptsEscapes) {
  GrammarVocab v = TinyVocab();
  auto e = GrammarEngine::Create(v, TestOptions());
  ASSERT_TRUE(e.ok()) << e.status();
  auto g = MustCompile(**e, Make(Kind::kStructuralTag, R"({"type": "structural_tag",)"
      R"( "format": {"type": "tag", "begin": "<c>", "end": "</c>", "content":)"
      R"( {"type": "json_schema", "json_schema": {"type": "object", "properties":)"
      R"( {"s": {"type": "string", "maxLength": 2}}, "required": ["s"]}}}})"));
  ASSERT_NE(g, nullptr);
  const std::string call = R"(<c>{"s": "\"\u00e9"}</c>)";
  GrammarMatcherState ok(g);
  ASSERT_EQ(Walk(ok, v, call), call.size());
  EXPECT_EQ(Allowed(ok, v.vocab_size), std::vector<int32_t>{kEos});
  const std::string over = R"(<c>{"s": "\"ab"}</c>)";
  GrammarMatcherState refused(g);
  EXPECT_EQ(Walk(refused, v, over), over.find("b\""));
}

// The model's vocabulary (ModelUnderTest): a JSON schema compiles, and a document is generated
// through the masks by taking, at each step, the longest allowed token that continues
// the target text — the model's own tokens are usable under the grammar.
TEST(GrammarEngineModelTest, DefaultModelVocabularyFollowsAJsonSchema) {
  WEFT_REQUIRE_MODEL_UNDER_TEST(path);
  std::unique_ptr<Tokenizer> tok = LoadTokenizer(path);
  ASSERT_NE(tok, nullptr);
  const absl::Time t_info = absl::Now();
  GrammarVocab vocab = GrammarVocabFromTokenizer(*tok, tok->vocab_size(), ToolCallFormat::kHermes);
  auto engine = GrammarEngine::Create(vocab, TestOptions());
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::fprintf(stderr, "vocabulary and tokenizer info: %.1f ms\n",
               absl::ToDoubleMilliseconds(absl::Now() - t_info));
  // A chat model's end of turn ends a constrained answer (Gemma's <end_of_turn>).
  for (const char* eot : {"<end_of_turn>", "<|im_end|>"}) {
    const int32_t id = tok->FindToken(eot);
    if (id >= 0) {
      EXPECT_NE(std::find(vocab.stop_token_ids.begin(), vocab.stop_token_ids.end(), id),
                vocab.stop_token_ids.end()) << eot;
    }
  }
  const absl::Time t0 = absl::Now();
  auto g = MustCompile(**engine, Make(Kind::kJsonSchema, R"({"type":"object","properties":{)"
      R"("name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":0,)"
      R"("maximum":150},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3}},)"
      R"("required":["name","age"]})"));
  ASSERT_NE(g, nullptr);
  std::fprintf(stderr, "compile: %.1f ms (vocabulary %d), %.1f MiB cached\n",
               absl::ToDoubleMilliseconds(absl::Now() - t0), vocab.vocab_size,
               g->memory_bytes() / 1048576.0);
  GrammarMatcherState m(g);
  const std::string target = R"({"name": "Ada Lovelace", "age": 36, "tags": ["a", "b"]})";
  absl::Duration mask_time;
  int steps = 0;
  ASSERT_EQ(Walk(m, vocab, target, &mask_time, &steps), target.size());
  ExpectOnlyEog(m, *tok, vocab.vocab_size);
  std::fprintf(stderr, "mask: %.1f us per step over %d steps\n",
               absl::ToDoubleMicroseconds(mask_time) / steps, steps);
}

// A length-bounded string (string_length_lowering.h) with the model's tokens: JSON's
// escapes are accepted and each counts as one character (a surrogate pair as one), the
// bound holds, and raw control characters, unknown escapes and lone surrogates are refused.
TEST(GrammarEngineModelTest, BoundedStringAcceptsEscapesCountedAsCharacters) {
  WEFT_REQUIRE_MODEL_UNDER_TEST(path);
  std::unique_ptr<Tokenizer> tok = LoadTokenizer(path);
  ASSERT_NE(tok, nullptr);
  GrammarVocab vocab = GrammarVocabFromTokenizer(*tok, tok->vocab_size(), ToolCallFormat::kHermes);
  auto engine = GrammarEngine::Create(vocab, TestOptions());
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto schema = [](int max) {
    return absl::StrCat(R"({"type":"object","properties":{"s":{"type":"string",)",
                        R"("minLength":1,"maxLength":)", max, R"(}},"required":["s"]})");
  };
  auto g6 = MustCompile(**engine, Make(Kind::kJsonSchema, schema(6)));
  auto g5 = MustCompile(**engine, Make(Kind::kJsonSchema, schema(5)));
  auto g1 = MustCompile(**engine, Make(Kind::kJsonSchema, schema(1)));
  ASSERT_TRUE(g6 && g5 && g1);
  // 6 characters: a " b newline c e-acute (escaped as \u00e9).
  const std::string six = R"({"s": "a\"b\nc\u00e9"})";
  {
    GrammarMatcherState m(g6);
    ASSERT_EQ(Walk(m, vocab, six), six.size());
    ExpectOnlyEog(m, *tok, vocab.vocab_size);
  }
  {
    GrammarMatcherState m(g5);  // over the bound: refused at the sixth character
    EXPECT_EQ(Walk(m, vocab, six), six.find("\\u00e9"));
  }
  // Every escape JSON has, one character each, both hex cases.
  for (const char* body : {R"(\")", R"(\\)", R"(\/)", R"(\b)", R"(\f)", R"(\n)", R"(\r)",
                           R"(\t)", R"(\u00E9)", R"(\uD83D\uDE00)", "\xc3\xa9", "\x7f"}) {
    const std::string doc = absl::StrCat(R"({"s": ")", body, R"("})");
    GrammarMatcherState m(g1);
    ASSERT_EQ(Walk(m, vocab, doc), doc.size()) << doc;
    ExpectOnlyEog(m, *tok, vocab.vocab_size);
  }
  // Refused where the string's body starts: raw control characters, an escape JSON does
  // not have, a lone surrogate (high then not low; low alone), an empty string (minLength).
  for (const char* body : {"\n", "\t", "\x01", R"(\x41)", R"(\a)", R"(\uD83Dx)", R"(\uDE00)",
                           ""}) {
    const std::string doc = absl::StrCat(R"({"s": ")", body, R"("})");
    GrammarMatcherState m(g1);
    EXPECT_LT(Walk(m, vocab, doc), doc.size()) << doc;
  }
}

// Each tool-call format's structural tag (common/tool_call_format.h) over the model's
// vocabulary: a well-formed native call goes through and then only end-of-generation is
// allowed (one call, or a closed list); a malformed one (another format's wrapper, a
// wrong argument type or name, an unknown tool) is stopped.
TEST(GrammarEngineModelTest, ToolCallFormatsHoldTheModelToTheirNativeCall) {
  WEFT_REQUIRE_MODEL_UNDER_TEST(path);
  std::unique_ptr<Tokenizer> tok = LoadTokenizer(path);
  ASSERT_NE(tok, nullptr);
  GrammarVocab vocab = GrammarVocabFromTokenizer(*tok, tok->vocab_size(), ToolCallFormat::kHermes);
  auto engine = GrammarEngine::Create(vocab, TestOptions());
  ASSERT_TRUE(engine.ok()) << engine.status();
  const ToolSchema tools[] = {
      {"get_weather", R"({"type": "object", "properties": {"city": {"type": "string"}},)"
                      R"( "required": ["city"], "additionalProperties": false})"}};
  struct Case {
    ToolCallFormat format;
    ToolCallMode mode;
    std::string good, bad;
    bool parallel = false;  // true: only where the calls' list closes (Nemo's "]")
  };
  const std::string args = R"({"city": "Oslo"})";
  const Case cases[] = {
      {ToolCallFormat::kHermes, ToolCallMode::kRequired,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + args + "}\n</tool_call>",
       "{\"name\": \"get_weather\", \"parameters\": " + args + "}"},
      {ToolCallFormat::kLlama3, ToolCallMode::kRequired,
       "{\"name\": \"get_weather\", \"parameters\": " + args + "}",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": 7}}"},
      {ToolCallFormat::kLlama3, ToolCallMode::kAuto,
       "Let me look. {\"name\": \"get_weather\", \"parameters\": " + args + "}",
       "Let me look. {\"name\": \"get_time\", \"parameters\": {}}"},
      {ToolCallFormat::kMistralNemo, ToolCallMode::kRequired,
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " + args + "}]",
       "[TOOL_CALLS]{\"name\": \"get_weather\", \"arguments\": " + args + "}"},
      {ToolCallFormat::kMistralNemo, ToolCallMode::kAuto,
       "Sure. [TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " + args +
           "}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]",
       "Sure. [TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Oslo\"}}]",
       true},
      {ToolCallFormat::kMistralArgs, ToolCallMode::kRequired,
       "[TOOL_CALLS]get_weather[ARGS]" + args,
       "[TOOL_CALLS]get_weather[ARGS]{\"city\": 7}"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(ToolCallFormatName(c.format), " mode ", static_cast<int>(c.mode)));
    auto g = MustCompile(**engine, Make(Kind::kStructuralTag,
                                        ToolCallsStructuralTag(c.format, tools, c.mode, c.parallel)));
    ASSERT_NE(g, nullptr);
    GrammarMatcherState good(g);
    ASSERT_EQ(Walk(good, vocab, c.good), c.good.size());
    ExpectOnlyEog(good, *tok, vocab.vocab_size);
    GrammarMatcherState bad(g);
    EXPECT_LT(Walk(bad, vocab, c.bad), c.bad.size()) << c.bad;
  }
}

}  // namespace
}  // namespace weft
