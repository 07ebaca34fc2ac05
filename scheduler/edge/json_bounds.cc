#include "scheduler/edge/json_bounds.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace weft {
namespace {

using Json = nlohmann::ordered_json;

// Counts, refuses at the first violation (returning false stops the parser).
class BoundsSax final : public nlohmann::json_sax<Json> {
 public:
  explicit BoundsSax(const JsonBounds& b) : b_(b) {}
  const std::string& error() const { return error_; }

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return Open(); }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return Close(); }
  bool key(string_t&) override {
    if (++members_.back() > b_.max_object_members) {
      return Fail(absl::StrCat("an object has more than ", b_.max_object_members, " members"));
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return Fail("the body is not valid JSON");
  }

 private:
  bool Open() {
    if (static_cast<int>(members_.size()) >= b_.max_depth) {
      return Fail(absl::StrCat("the JSON is nested more than ", b_.max_depth, " levels deep"));
    }
    members_.push_back(0);
    return true;
  }
  bool Close() {
    members_.pop_back();
    return true;
  }
  bool Fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    return false;
  }

  const JsonBounds& b_;
  std::vector<size_t> members_;  // per open container: keys so far (arrays: unused)
  std::string error_;
};

}  // namespace

absl::Status CheckJsonBounds(absl::string_view text, const JsonBounds& bounds) {
  BoundsSax sax(bounds);
  const bool ok = Json::sax_parse(text.begin(), text.end(), &sax, nlohmann::detail::input_format_t::json,
                                  /*strict=*/true);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(sax.error().empty() ? "the body is not valid JSON"
                                                        : sax.error());
}

}  // namespace weft
