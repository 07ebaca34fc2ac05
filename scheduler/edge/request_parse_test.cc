#include "scheduler/edge/request_parse.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "weft/v1/generate.pb.h"

namespace weft {
namespace {

// Serializes `req` and swaps every "@@@@" for four bytes that are not UTF-8 (a string
// set to them would not serialize cleanly).
std::string WithBadUtf8(const weft::v1::GenerateRequest& req) {
  std::string bytes = req.SerializeAsString();
  for (size_t at = bytes.find("@@@@"); at != std::string::npos; at = bytes.find("@@@@", at)) {
    bytes.replace(at, 4, "\xff\xfe\xc3\x28");
  }
  return bytes;
}

TEST(RequestParseTest, ParsesAGoodRequest) {
  weft::v1::GenerateRequest req;
  req.set_text("héllo");
  req.mutable_stopping()->add_stop("\n\n");
  weft::v1::GenerateRequest out;
  ASSERT_TRUE(ParseMessage(req.SerializeAsString(), &out).ok());
  EXPECT_EQ(out.text(), "héllo");
  EXPECT_EQ(out.stopping().stop(0), "\n\n");
}

TEST(RequestParseTest, NamesTheStringFieldThatIsNotUtf8) {
  struct Case {
    const char* field;
    void (*fill)(weft::v1::GenerateRequest*);
  };
  const Case cases[] = {
      {"text", [](weft::v1::GenerateRequest* r) { r->set_text("ab@@@@"); }},
      {"model",
       [](weft::v1::GenerateRequest* r) {
         r->set_model("@@@@");
         r->set_text("x");
       }},
      {"chat.messages[1].content",
       [](weft::v1::GenerateRequest* r) {
         auto* c = r->mutable_chat();
         c->add_messages()->set_content("fine");
         c->add_messages()->set_content("x@@@@");
       }},
      {"chat.messages[0].role",
       [](weft::v1::GenerateRequest* r) { r->mutable_chat()->add_messages()->set_role("@@@@"); }},
      {"stopping.stop[2]",
       [](weft::v1::GenerateRequest* r) {
         r->set_text("x");
         for (const char* s : {"a", "b", "@@@@"}) r->mutable_stopping()->add_stop(s);
       }},
      {"client_request_id",
       [](weft::v1::GenerateRequest* r) {
         r->set_text("x");
         r->set_client_request_id("@@@@");
       }},
  };
  for (const Case& c : cases) {
    weft::v1::GenerateRequest req;
    c.fill(&req);
    weft::v1::GenerateRequest out;
    absl::Status s = ParseMessage(WithBadUtf8(req), &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_TRUE(absl::StrContains(s.message(), std::string(c.field) + ": not valid UTF-8"))
        << c.field << ": " << s.message();
    EXPECT_TRUE(absl::StrContains(s.message(), "weft.v1.GenerateRequest")) << s.message();
  }
}

TEST(RequestParseTest, MalformedWireDataSaysWhere) {
  weft::v1::GenerateRequest req;
  req.set_text("hello");
  std::string bytes = req.SerializeAsString();
  weft::v1::GenerateRequest out;
  // Cut short: the text's length says 5, 2 bytes follow.
  absl::Status s = ParseMessage(bytes.substr(0, 4), &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "malformed message")) << s.message();
  EXPECT_TRUE(absl::StrContains(s.message(), "text")) << s.message();
  // Garbage.
  s = ParseMessage(std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11), &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // A length that runs past the end of a nested message.
  std::string nested("\x32\x02\x0a\x05", 4);  // stopping { field 1 len 5 } in 2 bytes
  s = ParseMessage(nested, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s.message();
}

TEST(RequestParseTest, DescribesNothingForBytesThatParse) {
  weft::v1::GenerateRequest req;
  req.set_text("x");
  EXPECT_EQ(DescribeParseFailure(req.SerializeAsString(), req.GetDescriptor()), "");
  EXPECT_EQ(DescribeParseFailure("", req.GetDescriptor()), "");
}

TEST(RequestParseTest, ReadsAMultiSliceByteBuffer) {
  weft::v1::GenerateRequest req;
  req.set_text(std::string(3000, 'a'));
  const std::string bytes = req.SerializeAsString();
  grpc::Slice slices[2] = {grpc::Slice(bytes.substr(0, 1000)), grpc::Slice(bytes.substr(1000))};
  grpc::ByteBuffer buffer(slices, 2);
  weft::v1::GenerateRequest out;
  ASSERT_TRUE(ParseMessage(buffer, &out).ok());
  EXPECT_EQ(out.text().size(), 3000u);
}

}  // namespace
}  // namespace weft
