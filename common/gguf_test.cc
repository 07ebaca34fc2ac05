#include "common/gguf.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/ggml_types.h"
#include "common/testing/gguf_builder.h"
#include "common/testing/model_path.h"
#include "common/testing/status_matchers.h"

namespace weft {
namespace {

using ::weft::testing::StatusIs;

using ::testing::HasSubstr;
using testing::GgufBuilder;

std::vector<uint8_t> F32Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<uint8_t> SmallFile() {
  GgufBuilder b;
  b.AddString("general.architecture", "llama");
  b.AddUint32("llama.block_count", 2);
  b.AddFloat32("llama.rope.freq_base", 10000.0f);
  b.AddBool("tokenizer.ggml.add_bos_token", false);
  b.AddInt64("some.int64", -5);
  b.AddUint64("some.uint64", 1ull << 40);
  b.AddFloat64("some.f64", 0.25);
  b.AddInt8("some.i8", -3);
  b.AddUint8("some.u8", 200);
  b.AddInt16("some.i16", -300);
  b.AddUint16("some.u16", 60000);
  b.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "\xc3\xa9"});
  b.AddInt32Array("tokenizer.ggml.token_type", {1, 1, 3});
  b.AddFloat32Array("tokenizer.ggml.scores", {0.5f, -1.0f, 2.0f});
  b.AddTensor("t0", {4, 2}, 0, F32Bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  b.AddTensor("t1", {3}, 0, F32Bytes({9, 10, 11}));
  return b.Build();
}

TEST(GgufTest, ParsesEveryMetadataTypeAndTensors) {
  const std::vector<uint8_t> bytes = SmallFile();
  auto file = GgufFile::FromBuffer(bytes.data(), bytes.size());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetInt("llama.block_count"), 2);
  EXPECT_FLOAT_EQ(*f.GetFloat("llama.rope.freq_base"), 10000.0f);
  EXPECT_FALSE(*f.GetBool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(*f.GetInt("some.int64"), -5);
  EXPECT_EQ(f.Find("some.uint64")->u, 1ull << 40);
  EXPECT_DOUBLE_EQ(*f.GetFloat("some.f64"), 0.25);
  EXPECT_EQ(*f.GetInt("some.i8"), -3);
  EXPECT_EQ(*f.GetInt("some.u8"), 200);
  EXPECT_EQ(*f.GetInt("some.i16"), -300);
  EXPECT_EQ(*f.GetInt("some.u16"), 60000);
  EXPECT_THAT(**f.GetStringArray("tokenizer.ggml.tokens"),
              ::testing::ElementsAre("a", "b", "\xc3\xa9"));
  EXPECT_THAT(**f.GetIntArray("tokenizer.ggml.token_type"), ::testing::ElementsAre(1, 1, 3));
  EXPECT_THAT(**f.GetFloatArray("tokenizer.ggml.scores"), ::testing::ElementsAre(0.5, -1.0, 2.0));
  EXPECT_EQ(*f.GetIntOr("absent", 7), 7);
  EXPECT_THAT(f.GetInt("absent").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(f.GetInt("general.architecture").status().code(),
            absl::StatusCode::kInvalidArgument);

  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensor* t0 = f.FindTensor("t0");
  ASSERT_NE(t0, nullptr);
  EXPECT_THAT(t0->ne, ::testing::ElementsAre(4, 2));
  EXPECT_EQ(t0->nbytes, 32u);
  EXPECT_EQ(t0->offset % 32, 0u);
  float v[8];
  std::memcpy(v, t0->data, sizeof(v));
  EXPECT_EQ(v[5], 6.0f);
  const GgufTensor* t1 = f.FindTensor("t1");
  ASSERT_NE(t1, nullptr);
  EXPECT_EQ(t1->offset - t0->offset, 32u);
  EXPECT_EQ(f.FindTensor("nope"), nullptr);
  EXPECT_EQ(f.Fingerprint().size(), 64u);
}

TEST(GgufTest, EveryTruncationIsAnErrorNeverACrash) {
  const std::vector<uint8_t> bytes = SmallFile();
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    auto file = GgufFile::FromBuffer(cut.data(), cut.size());
    EXPECT_FALSE(file.ok()) << "prefix of " << n << " bytes parsed";
  }
}

TEST(GgufTest, BadMagic) {
  std::vector<uint8_t> bytes = SmallFile();
  bytes[0] = 'X';
  auto file = GgufFile::FromBuffer(bytes.data(), bytes.size());
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("bad magic"));
}

TEST(GgufTest, BadVersion) {
  for (uint32_t version : {0u, 1u, 4u, 0xffffffffu}) {
    GgufBuilder b(version);
    b.AddUint32("x", 1);
    const auto bytes = b.Build();
    auto file = GgufFile::FromBuffer(bytes.data(), bytes.size());
    ASSERT_FALSE(file.ok());
    EXPECT_THAT(std::string(file.status().message()), HasSubstr("version"));
  }
}

TEST(GgufTest, HugeCountsAreRefusedWithoutAllocating) {
  std::vector<uint8_t> bytes = SmallFile();
  // tensor count at offset 8, kv count at 16.
  for (size_t off : {8u, 16u}) {
    std::vector<uint8_t> b = bytes;
    const uint64_t huge = 0xffffffffffffull;
    std::memcpy(&b[off], &huge, 8);
    auto file = GgufFile::FromBuffer(b.data(), b.size());
    EXPECT_FALSE(file.ok());
  }
  // A string array claiming 2^40 elements.
  GgufBuilder g;
  g.AddStringArray("arr", {"x"});
  std::vector<uint8_t> b = g.Build();
  // header 24 + key(8+3) + type 4 + elem type 4 = 43: array length follows.
  const uint64_t huge = 1ull << 40;
  std::memcpy(&b[43], &huge, 8);
  auto file = GgufFile::FromBuffer(b.data(), b.size());
  EXPECT_FALSE(file.ok());
}

TEST(GgufTest, TensorPastEndOfFile) {
  GgufBuilder b;
  b.AddTensor("t", {8}, 0, F32Bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  std::vector<uint8_t> bytes = b.Build();
  bytes.resize(bytes.size() - 4);
  auto file = GgufFile::FromBuffer(bytes.data(), bytes.size());
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("past the end"));
}

TEST(GgufTest, OffsetOverflowAndMisalignment) {
  GgufBuilder b;
  b.AddTensor("t", {8}, 0, F32Bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  const std::vector<uint8_t> bytes = b.Build();
  // The tensor's offset field is the last 8 bytes before the alignment padding:
  // 24 header + name (8+1) + n_dims 4 + ne 8 + type 4 = 49 .. 57.
  for (uint64_t bad : {uint64_t{0xffffffffffffffe0ull}, uint64_t{4}, uint64_t{1ull << 50}}) {
    std::vector<uint8_t> c = bytes;
    std::memcpy(&c[49], &bad, 8);
    auto file = GgufFile::FromBuffer(c.data(), c.size());
    EXPECT_FALSE(file.ok()) << bad;
  }
}

TEST(GgufTest, ShapeOverflowAndBadType) {
  GgufBuilder b;
  b.AddTensor("t", {1ull << 32, 1ull << 32}, 0, {});
  auto bytes = b.Build();
  EXPECT_FALSE(GgufFile::FromBuffer(bytes.data(), bytes.size()).ok());
  GgufBuilder c;
  c.AddTensor("t", {32}, 99, std::vector<uint8_t>(64));
  bytes = c.Build();
  auto file = GgufFile::FromBuffer(bytes.data(), bytes.size());
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("unknown type"));
  GgufBuilder d;  // Q4_1 row of 31 weights: not a multiple of the block
  d.AddTensor("t", {31}, 3, std::vector<uint8_t>(20));
  bytes = d.Build();
  EXPECT_FALSE(GgufFile::FromBuffer(bytes.data(), bytes.size()).ok());
}

TEST(GgufTest, DuplicateKeysAndBadAlignment) {
  GgufBuilder b;
  b.AddUint32("k", 1);
  b.AddUint32("k", 2);
  auto bytes = b.Build();
  EXPECT_FALSE(GgufFile::FromBuffer(bytes.data(), bytes.size()).ok());
  GgufBuilder c;
  c.AddUint32("general.alignment", 3);
  bytes = c.Build();
  EXPECT_FALSE(GgufFile::FromBuffer(bytes.data(), bytes.size()).ok());
}

TEST(GgufTest, OpenMissingFileIsNotFound) {
  auto file = GgufFile::Open("/nonexistent/model.gguf");
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status(), StatusIs(absl::StatusCode::kNotFound));
}

// Hand-computed blocks.
TEST(GgmlTypesTest, DequantizeQ4_0) {
  BlockQ4_0 blk;
  blk.d = Fp32ToFp16(0.5f);
  for (int j = 0; j < 16; ++j) blk.qs[j] = static_cast<uint8_t>((j & 0xf) | ((15 - j) << 4));
  float out[32];
  ASSERT_TRUE(DequantizeRow(GgmlType::kQ4_0, &blk, out, 32).ok());
  EXPECT_FLOAT_EQ(out[0], 0.5f * (0 - 8));
  EXPECT_FLOAT_EQ(out[3], 0.5f * (3 - 8));
  EXPECT_FLOAT_EQ(out[16], 0.5f * (15 - 8));
  EXPECT_FLOAT_EQ(out[31], 0.5f * (0 - 8));
}

TEST(GgmlTypesTest, DequantizeQ4_1) {
  BlockQ4_1 blk;
  blk.d = Fp32ToFp16(0.25f);
  blk.m = Fp32ToFp16(-1.0f);
  for (int j = 0; j < 16; ++j) blk.qs[j] = static_cast<uint8_t>(j | ((j ^ 5) << 4));
  float out[32];
  ASSERT_TRUE(DequantizeRow(GgmlType::kQ4_1, &blk, out, 32).ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_FLOAT_EQ(out[j], 0.25f * j - 1.0f);
    EXPECT_FLOAT_EQ(out[j + 16], 0.25f * (j ^ 5) - 1.0f);
  }
}

TEST(GgmlTypesTest, DequantizeQ8_0AndFloats) {
  BlockQ8_0 blk;
  blk.d = Fp32ToFp16(2.0f);
  for (int j = 0; j < 32; ++j) blk.qs[j] = static_cast<int8_t>(j - 16);
  float out[32];
  ASSERT_TRUE(DequantizeRow(GgmlType::kQ8_0, &blk, out, 32).ok());
  for (int j = 0; j < 32; ++j) EXPECT_FLOAT_EQ(out[j], 2.0f * (j - 16));

  const uint16_t h[2] = {Fp32ToFp16(1.5f), Fp32ToFp16(-0.125f)};
  ASSERT_TRUE(DequantizeRow(GgmlType::kF16, h, out, 2).ok());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -0.125f);
  const uint16_t bf[2] = {Fp32ToBf16(3.0f), Fp32ToBf16(-2.5f)};
  ASSERT_TRUE(DequantizeRow(GgmlType::kBF16, bf, out, 2).ok());
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_EQ(out[1], -2.5f);
  EXPECT_FALSE(DequantizeRow(GgmlType::kQ2_K, &blk, out, 256).ok());  // no dequantizer
  EXPECT_FALSE(DequantizeRow(GgmlType::kQ4_K, &blk, out, 32).ok());   // half a super-block
  EXPECT_FALSE(DequantizeRow(GgmlType::kQ8_0, &blk, out, 31).ok());
}

TEST(GgmlTypesTest, HalfConversionRoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(Fp32ToFp16(f), h) << h;
  }
  EXPECT_EQ(Fp16ToFp32(0x3c00), 1.0f);
  EXPECT_EQ(Fp16ToFp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
}

// A file holding `bytes` in the test's temporary directory.
std::string WriteTemp(const std::string& name, const std::vector<uint8_t>& bytes) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// OpenMetadata gives Open's metadata, tensor table and fingerprint, holds only the bytes
// up to the table's end, and no tensor data: whatever its first read (smaller than the
// header, so that it must grow, or larger than the file).
TEST(GgufTest, OpenMetadataReadsTheHeaderOnly) {
  const std::vector<uint8_t> bytes = SmallFile();
  const std::string path = WriteTemp("small.gguf", bytes);
  auto whole = GgufFile::Open(path);
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (size_t first_read : {size_t{1}, size_t{40}, size_t{100}, bytes.size() * 4}) {
    auto meta = GgufFile::OpenMetadata(path, {}, first_read);
    ASSERT_TRUE(meta.ok()) << meta.status();
    const GgufFile& m = **meta;
    EXPECT_EQ(m.size(), bytes.size());
    EXPECT_EQ(m.bytes_held(), (*whole)->header_bytes());
    EXPECT_LT(m.bytes_held(), bytes.size());
    EXPECT_EQ(m.keys(), (*whole)->keys());
    EXPECT_THAT(**m.GetStringArray("tokenizer.ggml.tokens"),
                ::testing::ElementsAre("a", "b", "\xc3\xa9"));
    EXPECT_EQ(m.Fingerprint(), (*whole)->Fingerprint());
    ASSERT_EQ(m.tensors().size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(m.tensors()[i].name, (*whole)->tensors()[i].name);
      EXPECT_EQ(m.tensors()[i].offset, (*whole)->tensors()[i].offset);
      EXPECT_EQ(m.tensors()[i].ne, (*whole)->tensors()[i].ne);
      EXPECT_EQ(m.tensors()[i].data, nullptr);
      EXPECT_NE((*whole)->tensors()[i].data, nullptr);
    }
  }
}

// Every truncation and a tensor past the end are errors for OpenMetadata too (it checks
// the tensor table against the file's size, not against what it read).
TEST(GgufTest, OpenMetadataRefusesWhatOpenRefuses) {
  const std::vector<uint8_t> bytes = SmallFile();
  for (size_t n = 0; n < bytes.size(); n += 7) {
    const std::string path =
        WriteTemp("cut.gguf", std::vector<uint8_t>(bytes.begin(), bytes.begin() + n));
    EXPECT_FALSE(GgufFile::OpenMetadata(path, {}, 16).ok()) << "prefix of " << n << " bytes";
    EXPECT_FALSE(GgufFile::Open(path).ok()) << "prefix of " << n << " bytes";
  }
  EXPECT_THAT(GgufFile::OpenMetadata("/nonexistent/x.gguf").status(),
              StatusIs(absl::StatusCode::kNotFound));
  // A header larger than the bound: refused, not read.
  const std::string path = WriteTemp("small2.gguf", bytes);
  EXPECT_THAT(GgufFile::OpenMetadata(path, {}, 16, 64).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("larger than 64 bytes")));
}

TEST(GgufModelTest, DefaultModelMetadataOnly) {
  WEFT_REQUIRE_DEFAULT_MODEL(path);
  auto whole = GgufFile::Open(path);
  auto meta = GgufFile::OpenMetadata(path);
  ASSERT_TRUE(whole.ok() && meta.ok()) << whole.status() << meta.status();
  EXPECT_EQ((*meta)->Fingerprint(), (*whole)->Fingerprint());
  EXPECT_EQ((*meta)->bytes_held(), (*whole)->header_bytes());  // 1.8 MB of 98 MB
  EXPECT_LT((*meta)->bytes_held() * 50, (*meta)->size());
  EXPECT_EQ((**(*meta)->GetStringArray("tokenizer.ggml.tokens")).size(), 49152u);
}

TEST(GgufModelTest, DefaultModelShape) {
  WEFT_REQUIRE_DEFAULT_MODEL(path);
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetInt("llama.block_count"), 30);
  EXPECT_EQ(*f.GetInt("llama.embedding_length"), 576);
  EXPECT_EQ(*f.GetInt("llama.attention.head_count_kv"), 3);
  const GgufTensor* emb = f.FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, GgmlType::kQ8_0);
  EXPECT_THAT(emb->ne, ::testing::ElementsAre(576, 49152));
  EXPECT_EQ(f.FindTensor("output.weight"), nullptr);
  EXPECT_EQ((**f.GetStringArray("tokenizer.ggml.tokens")).size(), 49152u);
  // Fingerprint is stable for the same bytes.
  EXPECT_EQ(f.Fingerprint(), f.Fingerprint());
}

}  // namespace
}  // namespace weft
