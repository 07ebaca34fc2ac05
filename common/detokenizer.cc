#include "common/detokenizer.h"

namespace weft {
namespace {

constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

// The WHATWG UTF-8 decoder: the lead byte fixes how many continuation bytes follow and
// narrows the range of the first one (E0: A0-BF, ED: 80-9F, F0: 90-BF, F4: 80-8F) so
// that overlongs, surrogates and values above U+10FFFF are rejected as early as
// possible.
void Utf8StreamDecoder::Byte(unsigned char b, std::string* out) {
  if (num_needed_ == 0) {
    if (b < 0x80) {
      out->push_back(static_cast<char>(b));
      return;
    }
    lower_ = 0x80;
    upper_ = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      num_needed_ = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      if (b == 0xE0) lower_ = 0xA0;
      if (b == 0xED) upper_ = 0x9F;
      num_needed_ = 2;
    } else if (b >= 0xF0 && b <= 0xF4) {
      if (b == 0xF0) lower_ = 0x90;
      if (b == 0xF4) upper_ = 0x8F;
      num_needed_ = 3;
    } else {
      out->append(kReplacement.data(), kReplacement.size());
      return;
    }
    pending_[0] = static_cast<char>(b);
    num_pending_ = 1;
    return;
  }
  if (b < lower_ || b > upper_) {
    // The held-back bytes are a maximal invalid subpart; `b` starts afresh.
    out->append(kReplacement.data(), kReplacement.size());
    num_needed_ = 0;
    num_pending_ = 0;
    Byte(b, out);
    return;
  }
  lower_ = 0x80;
  upper_ = 0xBF;
  pending_[num_pending_++] = static_cast<char>(b);
  if (--num_needed_ == 0) {
    out->append(pending_, num_pending_);
    num_pending_ = 0;
  }
}

void Utf8StreamDecoder::Append(absl::string_view bytes, std::string* out) {
  for (char c : bytes) Byte(static_cast<unsigned char>(c), out);
}

void Utf8StreamDecoder::Flush(std::string* out) {
  if (num_pending_ > 0) out->append(kReplacement.data(), kReplacement.size());
  num_pending_ = 0;
  num_needed_ = 0;
}

void IncrementalDetokenizer::Push(int32_t token_id, std::string* out) {
  if (options_.render_special && (tokenizer_->attr(token_id) &
                                  (Tokenizer::kAttrControl | Tokenizer::kAttrUnknown))) {
    decoder_.Append(tokenizer_->TokenText(token_id), out);
    return;
  }
  decoder_.Append(tokenizer_->TokenBytes(token_id), out);
}

std::string IncrementalDetokenizer::Push(int32_t token_id) {
  std::string out;
  Push(token_id, &out);
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  std::string out;
  decoder_.Flush(&out);
  return out;
}

}  // namespace weft
