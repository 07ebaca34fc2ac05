#include "scheduler/edge/tool_call_parser.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/chat_tools.h"
#include "nlohmann/json.hpp"

namespace weft::openai {
namespace {

constexpr char kHermesClose[] = "</tool_call>";

bool IsBlank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool IsPunct(char c) {
  return c == '{' || c == '}' || c == '[' || c == ']' || c == ':' || c == ',';
}
bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

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

enum class Match { kYes, kMore, kNo };

// Matches `pattern` (a format's literal text; '\x01' stands for a tool name, blanks in it
// are dropped) at the start of `buf`: blanks in `buf` are allowed next to JSON
// punctuation. With `need_next`, a byte must follow the match (so that trailing blanks
// are all read). On kYes: *consumed bytes, *name the name.
Match MatchPattern(absl::string_view buf, absl::string_view pattern, bool need_next, bool at_end,
                   std::string* name, size_t* consumed) {
  size_t i = 0;
  char prev = '\0';
  auto more = [&] { return at_end ? Match::kNo : Match::kMore; };
  for (char p : pattern) {
    if (IsBlank(p)) continue;
    if (IsPunct(p) || IsPunct(prev)) {
      while (i < buf.size() && IsBlank(buf[i])) ++i;
    }
    if (i == buf.size()) return more();
    if (p == '\x01') {
      const size_t start = i;
      while (i < buf.size() && IsNameChar(buf[i]) && i - start <= kMaxToolNameBytes) ++i;
      if (i - start > kMaxToolNameBytes) return Match::kNo;
      if (i == buf.size()) return more();
      if (i == start) return Match::kNo;
      *name = std::string(buf.substr(start, i - start));
    } else if (buf[i++] != p) {
      return Match::kNo;
    }
    prev = p;
  }
  if (need_next) {
    while (i < buf.size() && IsBlank(buf[i])) ++i;
    if (i == buf.size()) return more();
  }
  *consumed = i;
  return Match::kYes;
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

ParsedOutput ReadWholeAnswer(absl::string_view text, std::string id_prefix, ToolCallFormat format) {
  ToolCallParser parser(std::move(id_prefix), format);
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
      case State::kBlock: progressed = StepBlock(out); break;
      case State::kArguments: progressed = StepArguments(out); break;
      case State::kAfterCall: progressed = StepAfterCall(out); break;
      case State::kBetween: progressed = StepBetween(out); break;
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
  d.id = ToolCallId(format_, id_prefix_, d.index);
  d.name = std::move(name);
  d.arguments = std::move(arguments);
  blank_.clear();  // blanks between text and a call are dropped
  AddCallPiece(std::move(d), out);
}

bool ToolCallParser::StepText(ParsedOutput* out) {
  const absl::string_view trigger = syntax_.trigger;
  const size_t at = buf_.find(trigger.data(), 0, trigger.size());
  if (at != std::string::npos) {
    EmitText(absl::string_view(buf_).substr(0, at), out);
    buf_.erase(0, at);
    state_ = State::kHeader;
    return true;
  }
  const size_t keep = PartialTagSuffix(buf_, trigger);
  EmitText(absl::string_view(buf_).substr(0, buf_.size() - keep), out);
  buf_.erase(0, buf_.size() - keep);
  return false;
}

bool ToolCallParser::StepHeader(ParsedOutput* out) {
  const std::string pattern =
      absl::StrCat(syntax_.list_begin, syntax_.call_prefix, "\x01", syntax_.call_infix);
  std::string name;
  size_t consumed = 0;
  switch (MatchPattern(buf_, pattern, /*need_next=*/true, at_end_, &name, &consumed)) {
    case Match::kMore:
      return false;
    case Match::kYes:
      buf_.erase(0, consumed);
      StartCall(std::move(name), "", out);
      state_ = State::kArguments;
      return true;
    case Match::kNo:
      break;
  }
  if (format_ == ToolCallFormat::kHermes) {
    state_ = State::kBlock;
    return true;
  }
  // Not a call: the trigger is text.
  const size_t n = absl::string_view(syntax_.trigger).size();
  EmitText(absl::string_view(buf_).substr(0, n), out);
  buf_.erase(0, n);
  state_ = State::kText;
  return true;
}

// Hermes: a <tool_call> block of another layout, read whole at its end tag.
bool ToolCallParser::StepBlock(ParsedOutput* out) {
  const size_t open = absl::string_view(syntax_.trigger).size();
  const size_t close = buf_.find(kHermesClose, open);
  if (close == std::string::npos) return false;  // not yet known
  const std::string block = buf_.substr(open, close - open);
  const size_t consumed = close + absl::string_view(kHermesClose).size();
  const auto j = nlohmann::json::parse(block, nullptr, /*allow_exceptions=*/false);
  const auto name_it = j.is_object() ? j.find("name") : j.end();
  const auto args_it = j.is_object() ? j.find("arguments") : j.end();
  if (j.is_object() && name_it != j.end() && name_it->is_string() &&
      IsValidToolName(name_it->get<std::string>()) && args_it != j.end()) {
    StartCall(name_it->get<std::string>(),
              args_it->is_string() ? args_it->get<std::string>() : args_it->dump(), out);
    closed_calls_ = num_calls_;
    after_call_ = true;
  } else {
    EmitText(buf_.substr(0, consumed), out);
  }
  buf_.erase(0, consumed);
  state_ = State::kText;
  return true;
}

bool ToolCallParser::StepArguments(ParsedOutput* out) {
  // Scan the JSON value: it ends where its outermost bracket (or string) closes, or a
  // bare scalar meets a delimiter.
  bool done = false;
  size_t end = scanned_;
  for (; end < buf_.size() && !done; ++end) {
    const char c = buf_[end];
    if (in_string_) {
      if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        in_string_ = false;
        done = depth_ == 0;
      }
    } else if (!started_ && IsBlank(c)) {
      continue;
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      if (depth_ == 0) break;  // a bare scalar's delimiter (or no value at all)
      done = --depth_ == 0;
    } else if (depth_ == 0 && started_ && (c == ',' || IsBlank(c))) {
      break;
    }
    started_ = true;
  }
  if (end == buf_.size() && !done && !at_end_ && started_ && depth_ == 0 && !in_string_) {
    // A bare scalar may go on.
  } else if (end < buf_.size() || done) {
    done = true;
  }
  scanned_ = end;
  const size_t show = done ? end : RtrimBlank(buf_, end);
  const int index = num_calls_ - 1;
  if (show > args_shown_) {
    AddCallPiece({index, "", "", buf_.substr(args_shown_, show - args_shown_)}, out);
    args_shown_ = show;
  }
  if (!done) return false;
  buf_.erase(0, end);
  closed_calls_ = num_calls_;
  args_shown_ = scanned_ = 0;
  depth_ = 0;
  in_string_ = escape_ = started_ = false;
  state_ = State::kAfterCall;
  return true;
}

bool ToolCallParser::StepAfterCall(ParsedOutput* out) {
  std::string name;
  size_t consumed = 0;
  switch (MatchPattern(buf_, syntax_.call_suffix, false, at_end_, &name, &consumed)) {
    case Match::kMore:
      return false;
    case Match::kYes:
      buf_.erase(0, consumed);
      state_ = *syntax_.list_begin != '\0' ? State::kBetween : State::kText;
      break;
    case Match::kNo:  // not the format's: what follows is text
      state_ = State::kText;
      break;
  }
  after_call_ = true;
  return true;
}

// Mistral Nemo's list: the next call, or its end.
bool ToolCallParser::StepBetween(ParsedOutput* out) {
  std::string name;
  size_t consumed = 0;
  const std::string next =
      absl::StrCat(syntax_.separator, syntax_.call_prefix, "\x01", syntax_.call_infix);
  const Match call = MatchPattern(buf_, next, /*need_next=*/true, at_end_, &name, &consumed);
  if (call == Match::kYes) {
    buf_.erase(0, consumed);
    StartCall(std::move(name), "", out);
    state_ = State::kArguments;
    return true;
  }
  const Match end = MatchPattern(buf_, syntax_.list_end, false, at_end_, &name, &consumed);
  if (end == Match::kYes) buf_.erase(0, consumed);
  if (call == Match::kMore || end == Match::kMore) return false;
  state_ = State::kText;
  after_call_ = true;
  return true;
}

ParsedOutput ToolCallParser::Finish() {
  ParsedOutput out;
  at_end_ = true;
  Step(&out);
  switch (state_) {
    case State::kText:
    case State::kHeader:  // (left by Step only for a trigger that is not a call)
    case State::kBlock:
      EmitText(buf_, &out);
      if (num_calls_ == 0) out.content += blank_;  // a plain answer keeps its blanks
      break;
    case State::kArguments:  // cut short: the arguments it got
      if (buf_.size() > args_shown_) {
        AddCallPiece({num_calls_ - 1, "", "", buf_.substr(args_shown_)}, &out);
      }
      break;
    case State::kAfterCall:
    case State::kBetween:
      break;  // a wrapper cut short
  }
  buf_.clear();
  blank_.clear();
  closed_calls_ = num_calls_;
  return out;
}

ParsedOutput ToolCallCollector::Take(ParsedOutput pieces) {
  ParsedOutput out;
  out.content = std::move(pieces.content);
  pieces.content.clear();
  open_.Append(std::move(pieces));
  size_t given = 0;
  while (given < open_.calls.size() && open_.calls[given].index < parser_.num_closed_calls()) {
    out.calls.push_back(std::move(open_.calls[given++]));
  }
  open_.calls.erase(open_.calls.begin(), open_.calls.begin() + given);
  return out;
}

std::string ToolCallIdPrefix(absl::string_view request_id, int index) {
  return absl::StrCat("call_", request_id, "_", index, "_");
}

}  // namespace weft::openai
