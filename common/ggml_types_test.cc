// ggml_types against llama.cpp's ggml itself (tests/testdata/ggml_quant_ref.bin, made by
// tools/refdata/make_quant_ref.sh): the type table, and DequantizeRow bit for bit on
// tensors that ggml's quantizer wrote.
#include "common/ggml_types.h"

#include <cstring>
#include <string>
#include <vector>

#include "common/testing/ggml_quant_ref.h"
#include "common/tokenizer_test_util.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

testing::GgmlQuantRef LoadRef() {
  testing::GgmlQuantRef ref;
  std::string error;
  EXPECT_TRUE(testing::ReadGgmlQuantRef(testing::TestDataPath("ggml_quant_ref.bin"), &ref, &error))
      << error;
  return ref;
}

// Every type id we know has ggml's block size and block bytes (the GGUF reader sizes
// tensors with them), and our name up to case.
TEST(GgmlTypesTest, TypeTableMatchesGgml) {
  const testing::GgmlQuantRef ref = LoadRef();
  ASSERT_GT(ref.types.size(), 30u);
  int known = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    const GgmlTypeTraits* ours = GetGgmlTypeTraits(id);
    if (ours == nullptr) continue;
    ++known;
    const testing::GgmlTypeInfo* theirs = nullptr;
    for (const auto& t : ref.types) {
      if (t.id == id) theirs = &t;
    }
    ASSERT_NE(theirs, nullptr) << "ggml has no type " << id << " (" << ours->name << ")";
    EXPECT_EQ(ours->block_size, theirs->block_size) << ours->name;
    EXPECT_EQ(ours->type_size, theirs->type_size) << ours->name;
    std::string lower = ours->name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string their_lower = theirs->name;
    for (char& c : their_lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_EQ(lower, their_lower);
  }
  EXPECT_GE(known, 30);
}

// DequantizeRow gives ggml's to_float, bit for bit, for every quantized type Weft
// computes with.
TEST(GgmlTypesTest, DequantizeRowEqualsGgmlBitwise) {
  const testing::GgmlQuantRef ref = LoadRef();
  ASSERT_EQ(ref.cases.size(), 8u);
  for (const testing::GgmlQuantCase& c : ref.cases) {
    const auto type = static_cast<GgmlType>(c.type);
    SCOPED_TRACE(GgmlTypeName(c.type));
    const int64_t row_bytes = RowBytes(type, c.k);
    ASSERT_EQ(static_cast<size_t>(row_bytes * c.n), c.bytes.size());
    std::vector<float> row(c.k);
    int nonzero = 0;
    for (int64_t j = 0; j < c.n; ++j) {
      ASSERT_TRUE(DequantizeRow(type, c.bytes.data() + j * row_bytes, row.data(), c.k).ok());
      for (int64_t i = 0; i < c.k; ++i) {
        uint32_t a, b;
        std::memcpy(&a, &row[i], 4);
        std::memcpy(&b, &c.dequant[j * c.k + i], 4);
        ASSERT_EQ(a, b) << "row " << j << " weight " << i << ": " << row[i] << " vs "
                        << c.dequant[j * c.k + i];
        nonzero += row[i] != 0.0f;
      }
    }
    EXPECT_GT(nonzero, c.n * c.k / 2);
  }
}

TEST(GgmlTypesTest, UnsupportedTypesAreNamedAndRefused) {
  std::vector<float> out(256);
  const std::vector<uint8_t> zeros(1024);
  const absl::Status s = DequantizeRow(GgmlType::kQ2_K, zeros.data(), out.data(), 256);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Q2_K"), std::string::npos) << s;
  EXPECT_EQ(GgmlTypeName(static_cast<uint32_t>(GgmlType::kIQ4_XS)), "IQ4_XS");
  EXPECT_FALSE(DequantizeRow(GgmlType::kQ4_K, zeros.data(), out.data(), 128).ok());  // half a block
}

}  // namespace
}  // namespace weft
