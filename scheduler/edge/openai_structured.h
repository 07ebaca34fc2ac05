// Structured output on the OpenAI HTTP API: the body's `response_format` mapped onto the
// public request's weft.v1.Constraint (generate.proto), kept apart from openai_json.cc's
// parser so that the two evolve separately.
//   {"type": "text"} (or absent)                       -> no constraint
//   {"type": "json_object"}                            -> constraint.json_object
//   {"type": "json_schema", "json_schema": {"name": .., "schema": {..}, "strict": ..}}
//                                                      -> constraint.json_schema (the
//      schema's JSON text; enforced strictly whatever "strict" says: Weft's grammar
//      always holds the output to the schema)
// Anything else is INVALID_ARGUMENT naming the field (kBodyFieldSchema).
// Thread-safety: pure functions.
#ifndef WEFT_SCHEDULER_EDGE_OPENAI_STRUCTURED_H_
#define WEFT_SCHEDULER_EDGE_OPENAI_STRUCTURED_H_

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "weft/v1/generate.pb.h"

namespace weft::openai {

// Reads body["response_format"] (if any) into request->constraint.
absl::Status ParseResponseFormat(const nlohmann::ordered_json& body, weft::v1::GenerateRequest* request);

}  // namespace weft::openai

#endif  // WEFT_SCHEDULER_EDGE_OPENAI_STRUCTURED_H_
