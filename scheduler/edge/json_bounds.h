// CheckJsonBounds: a linear pass over an untrusted JSON text that refuses documents too
// deep or with too many members in one object, before any document is built.
//
// Why: the OpenAI edge builds requests as nlohmann::ordered_json, whose objects insert
// each key by a linear search of the keys before it: an object of n distinct keys costs
// n²/2 string compares (a 3.4 MB object of 260,000 keys held a core for over two
// minutes). With at most `max_object_members` keys per object the build is linear in the
// text's size (at most that many compares per key), and with at most `max_depth` levels
// of nesting the parser's and the destructor's recursion stay bounded. The pass itself is
// nlohmann's SAX parser (no document, constant work per token), stopped at the first
// violation.
//
// Thread-safety: a pure function.
#ifndef WEFT_SCHEDULER_EDGE_JSON_BOUNDS_H_
#define WEFT_SCHEDULER_EDGE_JSON_BOUNDS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace weft {

struct JsonBounds {
  int max_depth = 64;               // objects and arrays nested
  size_t max_object_members = 256;  // keys of one object (duplicates counted)
};

// OK when `text` is JSON within `bounds`; INVALID_ARGUMENT saying which bound (or that it
// is not JSON) otherwise.
absl::Status CheckJsonBounds(absl::string_view text, const JsonBounds& bounds = {});

}  // namespace weft

#endif  // WEFT_SCHEDULER_EDGE_JSON_BOUNDS_H_
