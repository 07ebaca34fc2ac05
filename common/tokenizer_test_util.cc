#include "common/tokenizer_test_util.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer_unicode.h"

namespace weft::testing {
namespace {

class Parser {
 public:
  explicit Parser(absl::string_view s) : s_(s) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    JsonValue v;
    if (!Value(&v)) return Error();
    SkipSpace();
    if (pos_ != s_.size()) return Error();
    return v;
  }

 private:
  absl::Status Error() const {
    return absl::InvalidArgumentError(absl::StrCat("bad JSON at offset ", pos_));
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' ||
                                s_[pos_] == '\t')) {
      ++pos_;
    }
  }
  bool Consume(absl::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  bool Value(JsonValue* v) {
    SkipSpace();
    if (pos_ >= s_.size()) return false;
    const char c = s_[pos_];
    if (c == '{') return Object(v);
    if (c == '[') return Array(v);
    if (c == '"') {
      v->type = JsonValue::Type::kString;
      return String(&v->str);
    }
    if (Consume("true")) {
      v->type = JsonValue::Type::kBool;
      v->b = true;
      return true;
    }
    if (Consume("false")) {
      v->type = JsonValue::Type::kBool;
      return true;
    }
    if (Consume("null")) return true;
    return Number(v);
  }
  bool Number(JsonValue* v) {
    const size_t start = pos_;
    while (pos_ < s_.size() && absl::string_view("+-0123456789.eE").find(s_[pos_]) !=
                                   absl::string_view::npos) {
      ++pos_;
    }
    if (pos_ == start) return false;
    v->type = JsonValue::Type::kNumber;
    v->number = std::strtod(std::string(s_.substr(start, pos_ - start)).c_str(), nullptr);
    return true;
  }
  bool Hex4(uint32_t* out) {
    if (pos_ + 4 > s_.size()) return false;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else return false;
    }
    *out = v;
    return true;
  }
  bool Escape(std::string* out) {
    const char e = s_[pos_++];
    switch (e) {
      case '"': case '\\': case '/': out->push_back(e); return true;
      case 'b': out->push_back('\b'); return true;
      case 'f': out->push_back('\f'); return true;
      case 'n': out->push_back('\n'); return true;
      case 'r': out->push_back('\r'); return true;
      case 't': out->push_back('\t'); return true;
      case 'u': break;
      default: return false;
    }
    uint32_t cp;
    if (!Hex4(&cp)) return false;
    if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(pos_, 2) == "\\u") {
      const size_t save = pos_;
      pos_ += 2;
      uint32_t lo;
      if (Hex4(&lo) && lo >= 0xDC00 && lo < 0xE000) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      } else {
        pos_ = save;
      }
    }
    tokenizer_internal::AppendUtf8(cp, out);
    return true;
  }
  bool String(std::string* out) {
    ++pos_;  // opening quote
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        out->push_back(c);
      } else if (pos_ >= s_.size() || !Escape(out)) {
        return false;
      }
    }
    return false;
  }
  bool Array(JsonValue* v) {
    v->type = JsonValue::Type::kArray;
    ++pos_;
    SkipSpace();
    if (Consume("]")) return true;
    while (true) {
      v->array.emplace_back();
      if (!Value(&v->array.back())) return false;
      SkipSpace();
      if (Consume("]")) return true;
      if (!Consume(",")) return false;
    }
  }
  bool Object(JsonValue* v) {
    v->type = JsonValue::Type::kObject;
    ++pos_;
    SkipSpace();
    if (Consume("}")) return true;
    while (true) {
      SkipSpace();
      std::string key;
      if (pos_ >= s_.size() || s_[pos_] != '"' || !String(&key)) return false;
      SkipSpace();
      if (!Consume(":")) return false;
      if (!Value(&v->object[key])) return false;
      SkipSpace();
      if (Consume("}")) return true;
      if (!Consume(",")) return false;
    }
  }

  absl::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

const JsonValue* JsonValue::Get(absl::string_view key) const {
  auto it = object.find(std::string(key));
  return it == object.end() ? nullptr : &it->second;
}

std::vector<int32_t> JsonValue::Ints() const {
  std::vector<int32_t> out;
  for (const JsonValue& v : array) out.push_back(static_cast<int32_t>(v.number));
  return out;
}

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) {
  return Parser(text).ParseDocument();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TestDataPath(const std::string& name) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && ws != nullptr) {
    return absl::StrCat(srcdir, "/", ws, "/tests/testdata/", name);
  }
  return absl::StrCat("tests/testdata/", name);
}

std::string FromHex(absl::string_view hex) {
  std::string out;
  if (hex.size() % 2 != 0) return out;
  auto nibble = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]);
    const int lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return "";
    out.push_back(static_cast<char>(hi << 4 | lo));
  }
  return out;
}

std::string EntryBytes(const JsonValue& e) {
  if (const JsonValue* hex = e.Get("text_hex")) return FromHex(hex->str);
  return e.Get("text")->str;
}

std::string PiecesFnv1a64(const Tokenizer& tok, bool render_special) {
  uint64_t h = 0xCBF29CE484222325ull;
  auto add = [&h](unsigned char b) {
    h ^= b;
    h *= 0x100000001B3ull;
  };
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    const std::string piece = tok.Decode({id}, {.render_special = render_special});
    const uint32_t n = static_cast<uint32_t>(piece.size());
    for (int k = 0; k < 4; ++k) add(static_cast<unsigned char>(n >> (8 * k)));
    for (char c : piece) add(static_cast<unsigned char>(c));
  }
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace weft::testing
