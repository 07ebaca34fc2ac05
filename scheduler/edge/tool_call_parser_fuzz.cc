// libFuzzer target: arbitrary bytes as a chat answer read for tool calls. The first byte
// picks the tool-call format (its top two bits) and where the answer is split in two
// pieces (as a stream's deltas would carry it);
// the text and the calls put together from the pieces must be those read from the
// whole answer, each call's first piece must carry its id and name, and nothing may
// crash or take more than linear time.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "scheduler/edge/tool_call_parser.h"

namespace {

struct Read {
  std::string content;
  std::vector<std::string> names, arguments;
};

void Collect(const weft::openai::ParsedOutput& p, Read* r) {
  r->content += p.content;
  for (const weft::openai::ToolCallDelta& d : p.calls) {
    if (!d.id.empty()) {
      if (d.index != static_cast<int>(r->names.size())) __builtin_trap();
      r->names.push_back(d.name);
      r->arguments.push_back(d.arguments);
    } else {
      if (d.index + 1 != static_cast<int>(r->names.size())) __builtin_trap();
      r->arguments.back() += d.arguments;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = text.empty() ? 0 : data[0] % (text.size() + 1);
  const auto format = static_cast<weft::ToolCallFormat>(data[0] >> 6);
  Read whole, pieces;
  Collect(weft::openai::ReadWholeAnswer(text, "c", format), &whole);
  weft::openai::ToolCallParser parser("c", format);
  Collect(parser.Feed(text.substr(0, split)), &pieces);
  Collect(parser.Feed(text.substr(split)), &pieces);
  Collect(parser.Finish(), &pieces);
  if (whole.content != pieces.content || whole.names != pieces.names ||
      whole.arguments != pieces.arguments) {
    __builtin_trap();
  }
  return 0;
}
