// Parsing a request message by hand, so that a message that does not parse gets
// INVALID_ARGUMENT naming the field, not gRPC's default (UNIMPLEMENTED, no message).
//
// gRPC deserializes a request before the handler runs, and a proto3 string field that is
// not valid UTF-8 makes the whole message fail to parse; the handler never learns why.
// The Generate method is therefore registered raw (grpc::ByteBuffer) and parsed here.
// When the bytes do not parse, they are walked field by field against the message's
// descriptor to say where: a string field with bytes that are not UTF-8
// ("chat.messages[1].content: not valid UTF-8"), or the wire format itself ("malformed
// message at byte 17 (field 3)").
//
// Thread-safety: pure functions.
#ifndef WEFT_SCHEDULER_SERVICE_REQUEST_PARSE_H_
#define WEFT_SCHEDULER_SERVICE_REQUEST_PARSE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"

namespace weft {

// Parses `bytes` into `message` (cleared first). INVALID_ARGUMENT, naming the field, when
// they do not parse.
absl::Status ParseMessage(absl::string_view bytes, google::protobuf::Message* message);

// The same, from a gRPC request buffer.
absl::Status ParseMessage(const grpc::ByteBuffer& buffer, google::protobuf::Message* message);

// Why `bytes` do not parse as `descriptor`'s message: the first field path whose string
// is not UTF-8, or where the wire format breaks. "" when no such place is found.
std::string DescribeParseFailure(absl::string_view bytes,
                                 const google::protobuf::Descriptor* descriptor);

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_REQUEST_PARSE_H_
