#include "tools/bench/llama_target.h"

#include <chrono>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace weft {
namespace bench {
namespace {

// Reads an integer member, or -1.
int64_t IntOr(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

absl::Status ErrorFromJson(const nlohmann::json& err) {
  std::string msg = err.dump();
  if (err.is_object()) {
    const auto m = err.find("message");
    if (m != err.end() && m->is_string()) msg = m->get<std::string>();
  } else if (err.is_string()) {
    msg = err.get<std::string>();
  }
  return absl::InternalError(absl::StrCat("llama-server error: ", msg));
}

absl::Status HttpStatusError(int code, absl::string_view body) {
  const std::string msg = absl::StrCat("HTTP ", code, ": ", body.substr(0, 300));
  switch (code) {
    case 400: return absl::InvalidArgumentError(msg);
    case 401: case 403: return absl::UnauthenticatedError(msg);
    case 404: return absl::NotFoundError(msg);
    case 429: return absl::ResourceExhaustedError(msg);
    case 503: return absl::UnavailableError(msg);
    default: return absl::InternalError(msg);
  }
}

}  // namespace

void LlamaStreamAccumulator::Add(int64_t t_ns, int32_t k) {
  if (k <= 0) return;
  record_->AddTokens(t_ns, k);
  if (live_tokens_ != nullptr) live_tokens_->fetch_add(k, std::memory_order_relaxed);
}

void LlamaStreamAccumulator::OnEvent(const SseEvent& event, int64_t t_ns) {
  if (!error_.ok()) return;
  if (!event.error.empty()) {
    const nlohmann::json e = nlohmann::json::parse(event.error, nullptr, false);
    error_ = e.is_discarded() ? absl::InternalError(absl::StrCat("llama-server error: ",
                                                                 event.error))
                              : ErrorFromJson(e);
    return;
  }
  if (event.data.empty() || event.data == "[DONE]") return;
  const nlohmann::json j = nlohmann::json::parse(event.data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    error_ = absl::DataLossError(absl::StrCat("bad SSE JSON: ", event.data.substr(0, 200)));
    return;
  }
  if (const auto err = j.find("error"); err != j.end()) {
    error_ = ErrorFromJson(*err);
    return;
  }
  const auto stop_it = j.find("stop");
  const bool stop = stop_it != j.end() && stop_it->is_boolean() && stop_it->get<bool>();
  int64_t reported = IntOr(j, "tokens_predicted");
  const auto timings = j.find("timings");
  if (stop && timings != j.end() && timings->is_object()) {
    const int64_t cache_n = IntOr(*timings, "cache_n");
    if (cache_n >= 0) record_->cached_prompt_tokens = static_cast<int32_t>(cache_n);
    if (reported < 0) reported = IntOr(*timings, "predicted_n");
  }
  const int32_t seen = record_->output_tokens;
  if (stop) {
    saw_final_ = true;
    if (reported >= 0) {
      record_->server_output_tokens = static_cast<int32_t>(reported);
      Add(t_ns, static_cast<int32_t>(reported - seen));
    } else {
      // No count: older servers put the last text in the final event.
      const auto toks = j.find("tokens");
      const auto content = j.find("content");
      if (toks != j.end() && toks->is_array() && !toks->empty()) {
        Add(t_ns, static_cast<int32_t>(toks->size()));
      } else if (content != j.end() && content->is_string() && !content->empty()) {
        Add(t_ns, 1);
      }
    }
    return;
  }
  if (reported >= 0) {
    Add(t_ns, static_cast<int32_t>(reported - seen));
    return;
  }
  const auto toks = j.find("tokens");
  Add(t_ns, toks != j.end() && toks->is_array() && !toks->empty()
                ? static_cast<int32_t>(toks->size())
                : 1);
}

absl::Status LlamaStreamAccumulator::Finish() const {
  if (!error_.ok()) return error_;
  if (!saw_final_) return absl::DataLossError("stream ended without its final (stop) event");
  return absl::OkStatus();
}

LlamaHttpTarget::LlamaHttpTarget(std::string label, HttpEndpoint endpoint,
                                 const RequestOptions& options)
    : Target(std::move(label)),
      endpoint_(std::move(endpoint)),
      path_(endpoint_.path.empty() ? "/completion" : endpoint_.path),
      options_(options) {}

std::string LlamaHttpTarget::BuildBody(const TraceRequest& request) const {
  std::string body;
  body.reserve(request.prompt.size() * 7 + 160);
  body += "{\"prompt\":[";
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    if (i > 0) body += ',';
    absl::StrAppend(&body, request.prompt[i]);
  }
  const nlohmann::json temperature = options_.temperature;
  absl::StrAppend(&body, "],\"n_predict\":", request.max_tokens,
                  ",\"ignore_eos\":true,\"stream\":true,\"temperature\":", temperature.dump(),
                  ",\"cache_prompt\":false}");
  return body;
}

void LlamaHttpTarget::Run(const TraceRequest& request, const RunClock& clock,
                          std::atomic<int64_t>* live_tokens, RequestRecord* record) {
  const std::string body = BuildBody(request);
  record->arrivals.reserve(static_cast<size_t>(request.max_tokens) + 1);
  LlamaStreamAccumulator acc(record, live_tokens);
  SseParser sse([&](const SseEvent& e) { acc.OnEvent(e, clock.NowNs()); });
  std::string error_body;
  HttpResponseParser* parser_ptr = nullptr;
  HttpResponseParser parser([&](absl::string_view bytes) {
    if (parser_ptr->status_code() == 200) {
      sse.Feed(bytes);
    } else if (error_body.size() < 4096) {
      error_body.append(bytes.data(), std::min<size_t>(bytes.size(), 4096));
    }
  });
  parser_ptr = &parser;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(options_.timeout_s * 1e6));

  record->send_ns = clock.NowNs();
  absl::Status s = HttpPost(endpoint_, path_, body, deadline, &parser);
  if (parser.status_code() == 200) sse.Finish();
  record->end_ns = clock.NowNs();
  if (parser.headers_done() && parser.status_code() != 200) {
    record->status = HttpStatusError(parser.status_code(), error_body);
  } else if (!s.ok()) {
    record->status = s;
  } else {
    record->status = acc.Finish();
  }
}

}  // namespace bench
}  // namespace weft
