#include "scheduler/edge/tool_call_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace weft::openai {
namespace {

// A call as a client puts it together from deltas.
struct Call {
  std::string id, name, arguments;
  bool operator==(const Call& o) const {
    return id == o.id && name == o.name && arguments == o.arguments;
  }
};

struct Answer {
  std::string content;
  std::vector<Call> calls;
};

void Collect(const ParsedOutput& p, Answer* a) {
  a->content += p.content;
  for (const ToolCallDelta& d : p.calls) {
    if (!d.id.empty()) {
      ASSERT_EQ(d.index, static_cast<int>(a->calls.size())) << "a call's first piece has its id";
      a->calls.push_back({d.id, d.name, d.arguments});
    } else {
      ASSERT_EQ(d.index + 1, static_cast<int>(a->calls.size())) << "pieces of the last call";
      a->calls.back().arguments += d.arguments;
    }
  }
}

// The text fed in pieces of `chunk` bytes, as a stream's deltas would carry it.
Answer Streamed(const std::string& text, size_t chunk,
                ToolCallFormat format = ToolCallFormat::kHermes) {
  ToolCallParser parser("call_x_0_", format);
  Answer a;
  for (size_t i = 0; i < text.size(); i += chunk) Collect(parser.Feed(text.substr(i, chunk)), &a);
  Collect(parser.Finish(), &a);
  return a;
}

Answer Whole(const std::string& text, ToolCallFormat format = ToolCallFormat::kHermes) {
  Answer a;
  Collect(ReadWholeAnswer(text, "call_x_0_", format), &a);
  return a;
}

const std::string kCall =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": "
    "{\"n\": 2}, \"note\": \"a } b\"}}\n</tool_call>";
const std::string kArgs = "{\"city\": \"Oslo\", \"days\": {\"n\": 2}, \"note\": \"a } b\"}";

TEST(ToolCallParserTest, TextAndCallsInAnyChunkingReadTheSame) {
  const std::vector<std::string> texts = {
      "Plain answer, no call.\n",
      "a <tool",          // held, then given back as text at the end
      kCall,
      "Let me check.\n" + kCall,
      kCall + "\n" + kCall,
      // Arguments without a '}' and a false start of the end tag (found by the fuzzer).
      "<tool_call>\n{\"name\": \"f\", \"arguments\": [1\n</tool_ca\n</tool_call>",
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2",  // cut by max_tokens
      // The end tag inside an argument string is no end (the JSON value is scanned).
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"</tool_call>\"}}\n</tool_call>",
  };
  for (const std::string& text : texts) {
    const Answer whole = Whole(text);
    for (size_t chunk : {1, 2, 3, 5, 8, 13, 1000}) {
      const Answer s = Streamed(text, chunk);
      EXPECT_EQ(s.content, whole.content) << text << " / " << chunk;
      EXPECT_EQ(s.calls, whole.calls) << text << " / " << chunk;
    }
  }
  EXPECT_EQ(Whole("Plain answer, no call.\n").content, "Plain answer, no call.\n");
  EXPECT_TRUE(Whole("Plain answer, no call.\n").calls.empty());
  EXPECT_EQ(Whole("a <tool").content, "a <tool");
  const Answer one = Whole("Let me check.\n" + kCall);
  EXPECT_EQ(one.content, "Let me check.");  // the blank before the call is dropped
  ASSERT_EQ(one.calls.size(), 1u);
  EXPECT_EQ(one.calls[0], (Call{"call_x_0_0", "get_weather", kArgs}));
  const Answer two = Whole(kCall + "\n" + kCall);
  EXPECT_EQ(two.content, "");
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.calls[1], (Call{"call_x_0_1", "get_weather", kArgs}));
  const Answer quoted = Whole(texts.back());
  ASSERT_EQ(quoted.calls.size(), 1u);
  EXPECT_EQ(quoted.calls[0].arguments, "{\"a\": \"</tool_call>\"}");
  const Answer cut = Whole(texts[texts.size() - 2]);
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.calls[0].arguments, "{\"a\": [1, 2");
}

TEST(ToolCallParserTest, NameComesFirstThenArgumentsAsTheyArrive) {
  ToolCallParser parser("c");
  ParsedOutput p = parser.Feed("<tool_call>\n{\"name\": \"get_weather\", \"argum");
  EXPECT_TRUE(p.empty());  // the header is not complete yet
  p = parser.Feed("ents\": {\"city\": \"Os");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].id, "c0");
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, "{\"city\": \"Os");
  p = parser.Feed("lo\"}");  // this '}' closes the arguments' object: shown
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].id, "");
  EXPECT_EQ(p.calls[0].arguments, "lo\"}");
  p = parser.Feed("}\n</tool_call>");  // the wrapper
  EXPECT_TRUE(p.empty());
  EXPECT_EQ(parser.num_calls(), 1);
  EXPECT_TRUE(parser.Finish().empty());
}

TEST(ToolCallParserTest, OtherLayoutsAreReadWholeOrLeftAsText) {
  Answer a = Whole("<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0], (Call{"call_x_0_0", "f", "{\"x\":1}"}));
  a = Whole("<tool_call>{\"arguments\": \"{}\", \"name\": \"f\"}</tool_call>");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, "{}");  // arguments given as a JSON text
  a = Whole("x <tool_call>not json</tool_call> y");
  EXPECT_TRUE(a.calls.empty());
  EXPECT_EQ(a.content, "x <tool_call>not json</tool_call> y");
  a = Whole("<tool_call>{\"name\": \"bad name\", \"arguments\": {}}</tool_call>");
  EXPECT_TRUE(a.calls.empty());
}

// Every chunking of `text` reads as the whole answer does.
void ExpectSameInAnyChunking(const std::string& text, ToolCallFormat format) {
  const Answer whole = Whole(text, format);
  for (size_t chunk : {1, 2, 3, 5, 8, 13, 1000}) {
    const Answer s = Streamed(text, chunk, format);
    EXPECT_EQ(s.content, whole.content) << text << " / " << chunk;
    EXPECT_EQ(s.calls, whole.calls) << text << " / " << chunk;
  }
}

TEST(ToolCallParserTest, Llama3CallsInAnyChunking) {
  const ToolCallFormat f = ToolCallFormat::kLlama3;
  const std::string call = "{\"name\": \"get_weather\", \"parameters\": " + kArgs + "}";
  for (const std::string& text :
       {call, "Sure.\n" + call, std::string("{\"name\": \"x\" is not a call}"),
        std::string("no call {\"name\""),
        std::string("{\"name\": \"f\", \"parameters\": {\"a\": [1, 2"),  // cut
        std::string("{\"name\":\"f\",\"parameters\":{}}"),
        std::string("{\"name\": \"f\" ,\n \"parameters\" :{}}")}) {
    ExpectSameInAnyChunking(text, f);
  }
  Answer a = Whole(call, f);
  EXPECT_EQ(a.content, "");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0], (Call{"call_x_0_0", "get_weather", kArgs}));
  a = Whole("Sure.\n" + call, f);
  EXPECT_EQ(a.content, "Sure.");
  ASSERT_EQ(a.calls.size(), 1u);
  a = Whole("{\"name\": \"x\" is not a call}", f);
  EXPECT_TRUE(a.calls.empty());
  EXPECT_EQ(a.content, "{\"name\": \"x\" is not a call}");
  // Not the trigger (the grammar's, which starts a held call): text, as the grammar left it.
  a = Whole("{\"name\":\"f\",\"parameters\":{}}", f);
  EXPECT_TRUE(a.calls.empty());
  // Blanks inside the header after the trigger are read.
  a = Whole("{\"name\": \"f\" ,\n \"parameters\" :{}}", f);
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, "{}");
  a = Whole("{\"name\": \"f\", \"parameters\": {\"a\": [1, 2", f);
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, "{\"a\": [1, 2");
}

TEST(ToolCallParserTest, MistralNemoListInAnyChunking) {
  const ToolCallFormat f = ToolCallFormat::kMistralNemo;
  const std::string one = "{\"name\": \"get_weather\", \"arguments\": " + kArgs + "}";
  const std::string two = "{\"name\": \"get_time\", \"arguments\": {}}";
  for (const std::string& text :
       {"[TOOL_CALLS][" + one + "]", "[TOOL_CALLS][" + one + ", " + two + "]",
        "Let me see. [TOOL_CALLS] [" + one + " ,\n" + two + " ]",
        std::string("a [TOOL_CALLS] b"), "[TOOL_CALLS][" + one + ", {\"name\": \"g\", \"argu"}) {
    ExpectSameInAnyChunking(text, f);
  }
  Answer a = Whole("[TOOL_CALLS][" + one + ", " + two + "]", f);
  EXPECT_EQ(a.content, "");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(a.calls[0].arguments, kArgs);
  EXPECT_EQ(a.calls[0].id.size(), 9u);  // what Nemo's template accepts back
  EXPECT_EQ(a.calls[0].id, ToolCallId(f, "call_x_0_", 0));
  EXPECT_EQ(a.calls[1], (Call{ToolCallId(f, "call_x_0_", 1), "get_time", "{}"}));
  a = Whole("Let me see. [TOOL_CALLS] [" + one + " ,\n" + two + " ]", f);
  EXPECT_EQ(a.content, "Let me see.");
  EXPECT_EQ(a.calls.size(), 2u);
  a = Whole("a [TOOL_CALLS] b", f);
  EXPECT_TRUE(a.calls.empty());
  EXPECT_EQ(a.content, "a [TOOL_CALLS] b");
}

TEST(ToolCallParserTest, MistralArgsCallsInAnyChunking) {
  const ToolCallFormat f = ToolCallFormat::kMistralArgs;
  const std::string calls = "[TOOL_CALLS]get_weather[ARGS]" + kArgs + "[TOOL_CALLS]get_time[ARGS]{}";
  for (const std::string& text : {calls, "Checking.\n" + calls, std::string("[TOOL_CALLS]bad name")}) {
    ExpectSameInAnyChunking(text, f);
  }
  const Answer a = Whole("Checking.\n" + calls, f);
  EXPECT_EQ(a.content, "Checking.");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(a.calls[0].arguments, kArgs);
  EXPECT_EQ(a.calls[1].name, "get_time");
  EXPECT_EQ(a.calls[1].arguments, "{}");
}

// The gRPC API's reading: each call whole, given once it is closed — before the next
// one has arrived — the same calls as the whole answer's in every chunking.
TEST(ToolCallParserTest, CollectorGivesEachCallWholeOnceClosed) {
  const ToolCallFormat f = ToolCallFormat::kMistralNemo;
  const std::string first = "Ok. [TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": \"}\"}}";
  const std::string text = first + ", {\"name\": \"b\", \"arguments\": {}}]";
  const Answer whole = Whole(text, f);
  ASSERT_EQ(whole.calls.size(), 2u);
  for (size_t chunk : {1, 2, 5, 1000}) {
    ToolCallCollector c("call_x_0_", f);
    std::string content;
    std::vector<Call> calls;
    auto take = [&](ParsedOutput p) {
      content += p.content;
      for (const ToolCallDelta& d : p.calls) calls.push_back({d.id, d.name, d.arguments});
    };
    for (size_t i = 0; i < first.size(); i += chunk) take(c.Feed(first.substr(i, chunk)));
    ASSERT_EQ(calls.size(), 1u) << chunk;  // closed by its '}'
    EXPECT_EQ(calls[0], whole.calls[0]);
    const std::string rest = text.substr(first.size());
    for (size_t i = 0; i < rest.size(); i += chunk) take(c.Feed(rest.substr(i, chunk)));
    take(c.Finish());
    EXPECT_EQ(calls, whole.calls) << chunk;
    EXPECT_EQ(content, "Ok.");
    EXPECT_EQ(c.num_calls(), 2);
  }
}

}  // namespace
}  // namespace weft::openai
