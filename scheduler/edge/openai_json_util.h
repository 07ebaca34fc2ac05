// What openai_json.cc (requests, errors) and openai_response.cc (responses) share:
// the JSON type and how it is written. Internal to the openai_json target.
#ifndef WEFT_SCHEDULER_EDGE_OPENAI_JSON_UTIL_H_
#define WEFT_SCHEDULER_EDGE_OPENAI_JSON_UTIL_H_

#include <string>

#include "nlohmann/json.hpp"

namespace weft::openai {

// Insertion-ordered objects: responses read in OpenAI's field order.
using Json = nlohmann::ordered_json;

// Every string may hold bytes that are not UTF-8 (token fragments): never throw.
inline std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace weft::openai

#endif  // WEFT_SCHEDULER_EDGE_OPENAI_JSON_UTIL_H_
