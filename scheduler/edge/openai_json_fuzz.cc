// libFuzzer target: arbitrary bytes as an OpenAI request body (both APIs), as the HTTP
// edge parses it. Must never crash or take time beyond linear (libFuzzer's -timeout);
// a body outside the JSON bounds (json_bounds.h) is never accepted.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "scheduler/edge/json_bounds.h"
#include "scheduler/edge/openai_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view body(reinterpret_cast<const char*>(data), size);
  const bool bounded = weft::CheckJsonBounds(body).ok();
  for (auto api : {weft::openai::Api::kCompletions, weft::openai::Api::kChatCompletions}) {
    auto parsed = weft::openai::ParseRequest(api, body);
    if (parsed.ok() && !bounded) __builtin_trap();
    if (!parsed.ok()) {
      // Every refusal is mappable to an OpenAI error with a 4xx status.
      const weft::openai::ApiError e = weft::openai::ErrorFor(parsed.status());
      if (e.http_status < 400 || e.http_status >= 500) __builtin_trap();
    }
  }
  return 0;
}
