#include "scheduler/edge/tool_call_parser.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/chat_tools.h"
#include "nlohmann/json.hpp"
#include "re2/re2.h"

namespace weft::openai {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t RtrimBlank(absl::string_view s, size_t end) {
  while (end > 0 && IsBlank(s[end - 1])) --end;
  return end;
}

// The length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t PartialTagSuffix(absl::string_view s, absl::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k) {
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

// The call's header as the grammar writes it (ToolCallBegin), blanks allowed.
const RE2& HeaderPattern() {
  static const RE2* const re = new RE2(
      R"re(\s*\{\s*"name"\s*:\s*"([A-Za-z0-9_-]{1,64})"\s*,\s*"arguments"\s*:\s*)re");
  return *re;
}

}  // namespace

void ParsedOutput::Append(ParsedOutput later) {
  content += later.content;
  for (ToolCallDelta& d : later.calls) {
    if (!calls.empty() && calls.back().index == d.index) {
      calls.back().arguments += d.arguments;
    } else {
      calls.push_back(std::move(d));
    }
  }
}

ParsedOutput ReadWholeAnswer(absl::string_view text, std::string id_prefix) {
  ToolCallParser parser(std::move(id_prefix));
  ParsedOutput all = parser.Feed(text);
  all.Append(parser.Finish());
  return all;
}

ParsedOutput ToolCallParser::Feed(absl::string_view text) {
  buf_.append(text.data(), text.size());
  ParsedOutput out;
  Step(&out);
  return out;
}

void ToolCallParser::Step(ParsedOutput* out) {
  for (;;) {
    bool progressed = false;
    switch (state_) {
      case State::kText: progressed = StepText(out); break;
      case State::kHeader: progressed = StepHeader(out); break;
      case State::kArguments: progressed = StepArguments(out); break;
    }
    if (!progressed) return;
  }
}

void ToolCallParser::EmitText(absl::string_view text, ParsedOutput* out) {
  size_t begin = 0;
  while (begin < text.size() && IsBlank(text[begin])) ++begin;
  blank_.append(text.data(), begin);
  if (begin == text.size()) return;
  const size_t end = RtrimBlank(text, text.size());
  // Blanks right after a call belong to no text: dropped.
  if (!after_call_) out->content += blank_;
  blank_.clear();
  after_call_ = false;
  out->content.append(text.data() + begin, end - begin);
  blank_.append(text.data() + end, text.size() - end);
}

void ToolCallParser::AddCallPiece(ToolCallDelta piece, ParsedOutput* out) {
  ParsedOutput one;
  one.calls.push_back(std::move(piece));
  out->Append(std::move(one));
}

void ToolCallParser::StartCall(std::string name, std::string arguments, ParsedOutput* out) {
  ToolCallDelta d;
  d.index = num_calls_++;
  d.id = absl::StrCat(id_prefix_, d.index);
  d.name = std::move(name);
  d.arguments = std::move(arguments);
  blank_.clear();  // blanks between text and a call are dropped
  AddCallPiece(std::move(d), out);
}

bool ToolCallParser::StepText(ParsedOutput* out) {
  const absl::string_view open = kToolCallOpen;
  const size_t at = buf_.find(kToolCallOpen);
  if (at != std::string::npos) {
    EmitText(absl::string_view(buf_).substr(0, at), out);
    buf_.erase(0, at + open.size());
    state_ = State::kHeader;
    return true;
  }
  const size_t keep = PartialTagSuffix(buf_, open);
  EmitText(absl::string_view(buf_).substr(0, buf_.size() - keep), out);
  buf_.erase(0, buf_.size() - keep);
  return false;
}

bool ToolCallParser::StepHeader(ParsedOutput* out) {
  re2::StringPiece input(buf_);
  std::string name;
  // A byte must follow the header, so that its trailing blanks are all read.
  if (RE2::Consume(&input, HeaderPattern(), &name) && !input.empty()) {
    buf_.erase(0, buf_.size() - input.size());
    StartCall(std::move(name), "", out);
    state_ = State::kArguments;
    args_shown_ = 0;
    return true;
  }
  const size_t close = buf_.find(kToolCallClose);
  if (close == std::string::npos) return false;  // not yet known
  // Another layout: the whole block as one JSON object.
  const std::string block = buf_.substr(0, close);
  const size_t consumed = close + absl::string_view(kToolCallClose).size();
  const auto j = nlohmann::json::parse(block, nullptr, /*allow_exceptions=*/false);
  const auto name_it = j.is_object() ? j.find("name") : j.end();
  const auto args_it = j.is_object() ? j.find("arguments") : j.end();
  if (j.is_object() && name_it != j.end() && name_it->is_string() &&
      IsValidToolName(name_it->get<std::string>()) && args_it != j.end()) {
    StartCall(name_it->get<std::string>(),
              args_it->is_string() ? args_it->get<std::string>() : args_it->dump(), out);
    after_call_ = true;
  } else {
    EmitText(absl::StrCat(kToolCallOpen, buf_.substr(0, consumed)), out);
  }
  buf_.erase(0, consumed);
  state_ = State::kText;
  return true;
}

bool ToolCallParser::StepArguments(ParsedOutput* out) {
  const size_t close = buf_.find(kToolCallClose);
  const int index = num_calls_ - 1;
  if (close != std::string::npos) {
    // The arguments end before the wrapper's '}' (blanks around it dropped).
    size_t end = RtrimBlank(buf_, close);
    if (end > 0 && buf_[end - 1] == '}') end = RtrimBlank(buf_, end - 1);
    if (end > args_shown_) AddCallPiece({index, "", "", buf_.substr(args_shown_, end - args_shown_)}, out);
    buf_.erase(0, close + absl::string_view(kToolCallClose).size());
    state_ = State::kText;
    after_call_ = true;
    return true;
  }
  // Everything before the last '}' seen (it may be the wrapper's) and before what may
  // be the start of the end tag, blanks held.
  const size_t last_brace = buf_.rfind('}');
  const size_t tag_start = buf_.size() - PartialTagSuffix(buf_, kToolCallClose);
  const size_t safe =
      RtrimBlank(buf_, std::min(tag_start, last_brace == std::string::npos ? buf_.size() : last_brace));
  if (safe > args_shown_) {
    AddCallPiece({index, "", "", buf_.substr(args_shown_, safe - args_shown_)}, out);
    args_shown_ = safe;
  }
  return false;
}

ParsedOutput ToolCallParser::Finish() {
  ParsedOutput out;
  Step(&out);
  switch (state_) {
    case State::kText:
      EmitText(buf_, &out);
      if (num_calls_ == 0) out.content += blank_;  // a plain answer keeps its blanks
      break;
    case State::kHeader:
      EmitText(absl::StrCat(kToolCallOpen, buf_), &out);
      if (num_calls_ == 0) out.content += blank_;
      break;
    case State::kArguments:  // cut short: the arguments it got
      if (buf_.size() > args_shown_) {
        AddCallPiece({num_calls_ - 1, "", "", buf_.substr(args_shown_)}, &out);
      }
      break;
  }
  buf_.clear();
  blank_.clear();
  return out;
}

}  // namespace weft::openai
