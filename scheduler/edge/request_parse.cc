#include "scheduler/edge/request_parse.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/wire_format_lite.h"

namespace weft {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

constexpr int kMaxDepth = 32;

std::string Malformed(const CodedInputStream& in, absl::string_view path) {
  return absl::StrCat("malformed message at byte ", in.CurrentPosition(),
                      path.empty() ? "" : absl::StrCat(" (in ", path, ")"));
}

// Walks one message's fields up to the current limit; the first problem, or "".
std::string Walk(CodedInputStream* in, const Descriptor* d, const std::string& prefix, int depth) {
  if (depth > kMaxDepth) return absl::StrCat("message nested deeper than ", kMaxDepth);
  std::map<int, int> seen;  // field number -> occurrences (repeated-field indices)
  while (true) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) {
      // End of this message, or a tag that does not parse.
      return in->BytesUntilLimit() == 0 || in->BytesUntilLimit() == -1 ? ""
                                                                       : Malformed(*in, prefix);
    }
    const int number = WireFormatLite::GetTagFieldNumber(tag);
    const FieldDescriptor* f = d != nullptr ? d->FindFieldByNumber(number) : nullptr;
    std::string path =
        f != nullptr ? absl::StrCat(prefix, f->name()) : absl::StrCat(prefix, "#", number);
    if (f != nullptr && f->is_repeated()) absl::StrAppend(&path, "[", seen[number]++, "]");
    if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::SkipField(in, tag)) return Malformed(*in, path);
      continue;
    }
    uint32_t length = 0;
    if (!in->ReadVarint32(&length) || static_cast<int>(length) < 0) return Malformed(*in, path);
    if (f != nullptr && f->type() == FieldDescriptor::TYPE_STRING) {
      std::string value;
      if (!in->ReadString(&value, static_cast<int>(length))) return Malformed(*in, path);
      if (!google::protobuf::internal::IsStructurallyValidUTF8(value.data(),
                                                               static_cast<int>(value.size()))) {
        return absl::StrCat(path, ": not valid UTF-8 (a string field must be UTF-8 text)");
      }
    } else if (f != nullptr && f->type() == FieldDescriptor::TYPE_MESSAGE) {
      const int before = in->BytesUntilLimit();
      if (before != -1 && static_cast<int>(length) > before) return Malformed(*in, path);
      const CodedInputStream::Limit limit = in->PushLimit(static_cast<int>(length));
      std::string inner = Walk(in, f->message_type(), path + ".", depth + 1);
      if (!inner.empty()) return inner;
      in->PopLimit(limit);
    } else if (!in->Skip(static_cast<int>(length))) {
      return Malformed(*in, path);
    }
  }
}

}  // namespace

std::string DescribeParseFailure(absl::string_view bytes, const Descriptor* descriptor) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  in.SetRecursionLimit(kMaxDepth + 8);
  return Walk(&in, descriptor, "", 0);
}

absl::Status ParseMessage(absl::string_view bytes, google::protobuf::Message* message) {
  message->Clear();
  if (bytes.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("request message too large");
  }
  if (message->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::OkStatus();
  }
  std::string why = DescribeParseFailure(bytes, message->GetDescriptor());
  if (why.empty()) why = "it does not parse";
  return absl::InvalidArgumentError(
      absl::StrCat("request is not a valid ", message->GetDescriptor()->full_name(), ": ", why));
}

absl::Status ParseMessage(const grpc::ByteBuffer& buffer, google::protobuf::Message* message) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return absl::InvalidArgumentError("unreadable request buffer");
  if (slices.size() == 1) {
    return ParseMessage(
        absl::string_view(reinterpret_cast<const char*>(slices[0].begin()), slices[0].size()),
        message);
  }
  std::string bytes;
  bytes.reserve(buffer.Length());
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return ParseMessage(bytes, message);
}

}  // namespace weft
