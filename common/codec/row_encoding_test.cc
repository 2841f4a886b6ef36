#include "common/codec/row_encoding.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "common/codec/fp8.h"
#include "common/codec/ggml_blocks.h"
#include "common/gen/dequant_golden.h"

namespace engram {
namespace {

using ggml::internal::Kernel;

constexpr RowEncoding kAll[] = {RowEncoding::kFp8,  RowEncoding::kQ8_0,  RowEncoding::kQ2_K,
                                RowEncoding::kQ3_K, RowEncoding::kQ4_K,  RowEncoding::kQ5_K,
                                RowEncoding::kQ6_K, RowEncoding::kMxfp4, RowEncoding::kBf16,
                                RowEncoding::kF16,  RowEncoding::kF32};
constexpr Kernel kKernels[] = {Kernel::kPortable, Kernel::kAvx2, Kernel::kAvx512};

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

// The whole of gguf_dequant.json, through the reader engramctl dequant-check
// uses. Fails (fatally) when it does not load; every row must be row_bytes.
void LoadGolden(std::vector<DequantGoldenType>* types) {
  const std::string path = std::string(ENGRAM_GOLDEN_DIR) + "/gguf_dequant.json";
  absl::StatusOr<std::vector<DequantGoldenType>> golden = ReadDequantGolden(path);
  ASSERT_TRUE(golden.ok()) << golden.status();
  for (const DequantGoldenType& g : *golden) {
    for (const DequantGoldenRow& row : g.rows) {
      EXPECT_EQ(row.bytes.size(), static_cast<size_t>(g.row_bytes)) << g.name;
    }
  }
  *types = *std::move(golden);
}

RowEncoding EncodingOf(const DequantGoldenType& g) {
  const std::optional<RowEncoding> e = RowEncodingOfGgmlType(g.ggml_type);
  EXPECT_TRUE(e.has_value()) << g.name;
  return e.value_or(RowEncoding::kFp8);
}

TEST(RowEncodingGolden, CoversEveryBlockType) {
  std::vector<DequantGoldenType> golden;
  ASSERT_NO_FATAL_FAILURE(LoadGolden(&golden));
  std::vector<std::string> names;
  for (const DequantGoldenType& g : golden) names.push_back(g.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"Q8_0", "MXFP4", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}));
}

TEST(RowEncodingGolden, GeometryMatches) {
  std::vector<DequantGoldenType> golden;
  ASSERT_NO_FATAL_FAILURE(LoadGolden(&golden));
  for (const DequantGoldenType& g : golden) {
    const RowEncoding e = EncodingOf(g);
    EXPECT_EQ(RowEncodingName(e), absl::AsciiStrToLower(g.name));
    EXPECT_EQ(GgmlTypeOfRowEncoding(e), g.ggml_type) << g.name;
    EXPECT_EQ(BlockValues(e, 32), g.block_values) << g.name;
    EXPECT_EQ(BlockBytes(e, 32), g.block_bytes) << g.name;
    ASSERT_FALSE(g.rows.empty()) << g.name;
    const int head_dim = static_cast<int>(g.rows[0].f32.size());
    EXPECT_EQ(head_dim, 256) << g.name;
    EXPECT_EQ(EncodedRowBytes(e, head_dim, 32).value_or(-1), g.row_bytes) << g.name;
  }
}

// Every row of every type, through DecodeRows and through each kernel this
// CPU runs: f32 bit for bit (SameAsDequantGolden), bf16 the nearest-even
// rounding of each f32.
TEST(RowEncodingGolden, EveryRowDecodesBitForBit) {
  std::vector<DequantGoldenType> golden;
  ASSERT_NO_FATAL_FAILURE(LoadGolden(&golden));
  int rows_checked = 0;
  for (const DequantGoldenType& g : golden) {
    const RowEncoding e = EncodingOf(g);
    const ggml::Type t = static_cast<ggml::Type>(g.ggml_type);
    for (size_t r = 0; r < g.rows.size(); ++r) {
      const std::vector<uint8_t>& bytes = g.rows[r].bytes;
      const std::vector<float>& want = g.rows[r].f32;
      const int head_dim = static_cast<int>(want.size());
      ASSERT_EQ(bytes.size(), static_cast<size_t>(g.row_bytes));
      std::vector<float> got(head_dim);
      std::vector<uint16_t> got_bf16(head_dim);
      DecodeRows(e, bytes.data(), 1, head_dim, 32, got.data());
      DecodeRows(e, bytes.data(), 1, head_dim, 32, got_bf16.data());
      for (int j = 0; j < head_dim; ++j) {
        ASSERT_TRUE(SameAsDequantGolden(got[j], want[j]))
            << g.name << " row " << r << " value " << j << ": got " << got[j] << " (0x" << std::hex
            << Bits(got[j]) << "), want " << want[j] << " (0x" << Bits(want[j]) << ")";
        ASSERT_EQ(got_bf16[j], fp8::FloatToBf16(got[j])) << g.name << " row " << r << " " << j;
      }
      for (Kernel k : kKernels) {
        if (!ggml::internal::KernelSupported(k)) continue;
        std::vector<float> by_kernel(head_dim);
        std::vector<uint16_t> by_kernel_bf16(head_dim);
        ggml::internal::DequantizeRowWith(k, t, bytes.data(), head_dim, by_kernel.data());
        ggml::internal::DequantizeRowWith(k, t, bytes.data(), head_dim, by_kernel_bf16.data());
        EXPECT_EQ(by_kernel, got) << g.name << " row " << r << " kernel " << static_cast<int>(k);
        EXPECT_EQ(by_kernel_bf16, got_bf16) << g.name << " row " << r;
      }
      ++rows_checked;
    }
  }
  EXPECT_EQ(rows_checked, 42);
}

TEST(RowEncodingGolden, ManyRowsAtOnceEqualOneByOne) {
  std::vector<DequantGoldenType> golden;
  ASSERT_NO_FATAL_FAILURE(LoadGolden(&golden));
  for (const DequantGoldenType& g : golden) {
    const RowEncoding e = EncodingOf(g);
    const int head_dim = 256;
    std::vector<uint8_t> all;
    for (const DequantGoldenRow& row : g.rows) {
      all.insert(all.end(), row.bytes.begin(), row.bytes.end());
    }
    const size_t n = g.rows.size();
    std::vector<float> batch(n * head_dim), single(n * head_dim);
    std::vector<uint16_t> batch_bf16(n * head_dim), single_bf16(n * head_dim);
    DecodeRows(e, all.data(), n, head_dim, 32, batch.data());
    DecodeRows(e, all.data(), n, head_dim, 32, batch_bf16.data());
    for (size_t r = 0; r < n; ++r) {
      DecodeRows(e, g.rows[r].bytes.data(), 1, head_dim, 32, single.data() + r * head_dim);
      DecodeRows(e, g.rows[r].bytes.data(), 1, head_dim, 32, single_bf16.data() + r * head_dim);
    }
    EXPECT_EQ(batch, single) << g.name;
    EXPECT_EQ(batch_bf16, single_bf16) << g.name;
  }
}

TEST(RowEncoding, EncodedRowBytesAtHeadDim256) {
  const std::pair<RowEncoding, int> want[] = {
      {RowEncoding::kQ8_0, 272},  {RowEncoding::kQ2_K, 84},  {RowEncoding::kQ3_K, 110},
      {RowEncoding::kQ4_K, 144},  {RowEncoding::kQ5_K, 176}, {RowEncoding::kQ6_K, 210},
      {RowEncoding::kMxfp4, 136}, {RowEncoding::kBf16, 512}, {RowEncoding::kF16, 512},
      {RowEncoding::kF32, 1024},  {RowEncoding::kFp8, 264}};
  for (const auto& [e, bytes] : want) {
    absl::StatusOr<int> got = EncodedRowBytes(e, 256, 32);
    ASSERT_TRUE(got.ok()) << RowEncodingName(e) << ": " << got.status();
    EXPECT_EQ(*got, bytes) << RowEncodingName(e);
  }
  EXPECT_EQ(EncodedRowBytes(RowEncoding::kFp8, 7168, 128).value_or(-1), 7168 + 56);
  EXPECT_EQ(EncodedRowBytes(RowEncoding::kF16, 7, 32).value_or(-1), 14);
  EXPECT_EQ(EncodedRowBytes(RowEncoding::kQ8_0, 64, 0).value_or(-1), 68);  // scale_block unused
}

TEST(RowEncoding, RefusesHeadDimsThatAreNoWholeBlocks) {
  struct Case {
    RowEncoding e;
    int head_dim, scale_block;
    std::string block;  // the message names the encoding and this block size
  };
  const Case cases[] = {{RowEncoding::kQ8_0, 48, 32, "32"},   {RowEncoding::kMxfp4, 16, 32, "32"},
                        {RowEncoding::kQ2_K, 128, 32, "256"}, {RowEncoding::kQ6_K, 384, 32, "256"},
                        {RowEncoding::kQ4_K, 0, 32, "256"},   {RowEncoding::kF32, -4, 32, "1"},
                        {RowEncoding::kFp8, 100, 32, "32"},   {RowEncoding::kFp8, 0, 32, "32"}};
  for (const Case& c : cases) {
    absl::StatusOr<int> got = EncodedRowBytes(c.e, c.head_dim, c.scale_block);
    ASSERT_FALSE(got.ok()) << RowEncodingName(c.e) << " " << c.head_dim;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(got.status().message());
    EXPECT_NE(message.find(RowEncodingName(c.e)), std::string::npos) << message;
    EXPECT_NE(message.find("blocks of " + c.block + " "), std::string::npos) << message;
  }
  absl::StatusOr<int> no_block = EncodedRowBytes(RowEncoding::kFp8, 256, 0);
  ASSERT_FALSE(no_block.ok());
  EXPECT_NE(no_block.status().message().find("scale_block"), std::string::npos);
}

TEST(RowEncoding, NamesRoundTrip) {
  for (RowEncoding e : kAll) {
    absl::StatusOr<RowEncoding> parsed = ParseRowEncoding(RowEncodingName(e));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, e);
  }
  EXPECT_EQ(SupportedRowEncodings(),
            "e4m3_e8m0, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, mxfp4, bf16, f16, f32");
  for (std::string_view bad : {"", "Q8_0", "q4_0", "fp8", "bf16 "}) {
    absl::StatusOr<RowEncoding> parsed = ParseRowEncoding(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(SupportedRowEncodings()), std::string::npos);
    EXPECT_NE(parsed.status().message().find("\"" + std::string(bad) + "\""), std::string::npos);
  }
}

TEST(RowEncoding, GgmlTypeMapping) {
  const std::pair<uint32_t, RowEncoding> want[] = {
      {0, RowEncoding::kF32},   {1, RowEncoding::kF16},   {8, RowEncoding::kQ8_0},
      {10, RowEncoding::kQ2_K}, {11, RowEncoding::kQ3_K}, {12, RowEncoding::kQ4_K},
      {13, RowEncoding::kQ5_K}, {14, RowEncoding::kQ6_K}, {30, RowEncoding::kBf16},
      {39, RowEncoding::kMxfp4}};
  for (const auto& [id, e] : want) {
    EXPECT_EQ(RowEncodingOfGgmlType(id), e) << id;
    EXPECT_EQ(GgmlTypeOfRowEncoding(e), id) << id;
  }
  EXPECT_EQ(GgmlTypeOfRowEncoding(RowEncoding::kFp8), std::nullopt);
  // Q4_0, Q4_1, Q5_0, Q5_1, Q8_1, Q8_K, I8, F64, IQ4_NL and beyond.
  for (uint32_t id : {2u, 3u, 6u, 7u, 9u, 15u, 16u, 20u, 24u, 28u, 31u, 40u, 1000u}) {
    EXPECT_EQ(RowEncodingOfGgmlType(id), std::nullopt) << id;
  }
}

bool IsBf16Nan(uint16_t b) { return (b & 0x7FFF) > 0x7F80; }

// Random bytes (any f16 scale, NaN included) decode to the same bits with
// every kernel. NaNs (from NaN or infinite scales) compare as equal: which
// operand's NaN an operation passes on is the compiler's choice, in ggml too.
TEST(RowEncoding, KernelsAgreeOnRandomBlocks) {
  std::mt19937 rng(7);
  for (RowEncoding e : kAll) {
    if (e == RowEncoding::kFp8) continue;
    const ggml::Type t = static_cast<ggml::Type>(*GgmlTypeOfRowEncoding(e));
    const int head_dim = e >= RowEncoding::kBf16 ? 263 : 1024;  // plain types: a ragged tail
    const size_t n_rows = 5;
    const int row_bytes = EncodedRowBytes(e, head_dim, 32).value();
    std::vector<uint8_t> rows(n_rows * row_bytes);
    for (uint8_t& b : rows) b = static_cast<uint8_t>(rng());
    const size_t n = n_rows * head_dim;
    std::vector<float> want(n);
    std::vector<uint16_t> want_bf16(n);
    ggml::internal::DequantizeRowWith(Kernel::kPortable, t, rows.data(), n, want.data());
    ggml::internal::DequantizeRowWith(Kernel::kPortable, t, rows.data(), n, want_bf16.data());
    for (size_t j = 0; j < n; ++j) {
      if (!std::isnan(want[j])) {
        EXPECT_EQ(want_bf16[j], fp8::FloatToBf16(want[j])) << j;
      }
    }
    for (Kernel k : kKernels) {
      if (!ggml::internal::KernelSupported(k)) continue;
      std::vector<float> got(n);
      std::vector<uint16_t> got_bf16(n);
      ggml::internal::DequantizeRowWith(k, t, rows.data(), n, got.data());
      ggml::internal::DequantizeRowWith(k, t, rows.data(), n, got_bf16.data());
      for (size_t j = 0; j < n; ++j) {
        const bool both_nan = std::isnan(got[j]) && std::isnan(want[j]);
        ASSERT_TRUE(both_nan || Bits(got[j]) == Bits(want[j]))
            << RowEncodingName(e) << " kernel " << static_cast<int>(k) << " value " << j;
        const bool both_nan_bf16 = IsBf16Nan(got_bf16[j]) && IsBf16Nan(want_bf16[j]);
        ASSERT_TRUE(both_nan_bf16 || got_bf16[j] == want_bf16[j])
            << RowEncodingName(e) << " kernel " << static_cast<int>(k) << " value " << j;
      }
    }
  }
}

// Every f16: exact, by an independent formula.
TEST(RowEncoding, F16DecodesEveryValue) {
  std::vector<uint8_t> row(2 * 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    row[2 * h] = static_cast<uint8_t>(h);
    row[2 * h + 1] = static_cast<uint8_t>(h >> 8);
  }
  std::vector<float> got(65536);
  DecodeRows(RowEncoding::kF16, row.data(), 1, 65536, 0, got.data());
  for (uint32_t h = 0; h < 65536; ++h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    const float sign = (h & 0x8000) ? -1.0f : 1.0f;
    if (e == 31) {
      const uint32_t want = ((h & 0x8000u) << 16) | 0x7F800000u | (m ? 0x400000u | (m << 13) : 0);
      ASSERT_EQ(Bits(got[h]), want) << std::hex << h;
    } else {
      const float want = sign * (e == 0 ? std::ldexp(static_cast<float>(m), -24)
                                        : std::ldexp(static_cast<float>(1024 + m), e - 25));
      ASSERT_EQ(Bits(got[h]), Bits(want)) << std::hex << h;
    }
    ASSERT_EQ(Bits(ggml::Fp16ToFloat(static_cast<uint16_t>(h))), Bits(got[h]));
  }
}

TEST(RowEncoding, PlainTypesAndTheirBf16) {
  const float values[] = {1.0f,
                          -2.5f,
                          0.0f,
                          -0.0f,
                          3.14159274f,
                          1e-40f,
                          65504.0f,
                          -1e30f,
                          std::bit_cast<float>(0x3F808000u),   // tie, even: down
                          std::bit_cast<float>(0x3F818000u),   // tie, odd: up
                          std::bit_cast<float>(0x7F7FFFFFu)};  // rounds to infinity
  const int n = static_cast<int>(std::size(values));
  std::vector<uint8_t> f32(sizeof values), bf16(2 * n);
  std::memcpy(f32.data(), values, sizeof values);
  std::vector<float> got(n);
  std::vector<uint16_t> got_bf16(n);
  DecodeRows(RowEncoding::kF32, f32.data(), 1, n, 0, got.data());
  DecodeRows(RowEncoding::kF32, f32.data(), 1, n, 0, got_bf16.data());
  for (int j = 0; j < n; ++j) {
    EXPECT_EQ(Bits(got[j]), Bits(values[j])) << j;
    EXPECT_EQ(got_bf16[j], fp8::FloatToBf16(values[j])) << j;
    bf16[2 * j] = static_cast<uint8_t>(got_bf16[j]);
    bf16[2 * j + 1] = static_cast<uint8_t>(got_bf16[j] >> 8);
  }
  EXPECT_EQ(got_bf16[8], 0x3F80);
  EXPECT_EQ(got_bf16[9], 0x3F82);
  EXPECT_EQ(got_bf16[10], 0x7F80);
  // bf16 rows widen exactly and round back to themselves.
  std::vector<uint16_t> again(n);
  DecodeRows(RowEncoding::kBf16, bf16.data(), 1, n, 0, got.data());
  DecodeRows(RowEncoding::kBf16, bf16.data(), 1, n, 0, again.data());
  for (int j = 0; j < n; ++j) EXPECT_EQ(Bits(got[j]), uint32_t{got_bf16[j]} << 16) << j;
  EXPECT_EQ(again, got_bf16);
}

// ggml's q * d is -0 for q = 0 and a negative d (the golden writes it as 0).
TEST(RowEncoding, ZeroQuantsKeepTheSignOfTheScale) {
  std::vector<uint8_t> block(34, 0);
  block[1] = 0xBC;  // f16 -1.0
  std::vector<float> got(32);
  DecodeRows(RowEncoding::kQ8_0, block.data(), 1, 32, 0, got.data());
  for (float v : got) EXPECT_EQ(Bits(v), 0x80000000u);
}

TEST(RowEncoding, E8m0HalfScale) {
  EXPECT_EQ(Bits(ggml::E8m0ToFloatHalf(0)), 0x00200000u);  // 2^-128
  EXPECT_EQ(Bits(ggml::E8m0ToFloatHalf(1)), 0x00400000u);  // 2^-127
  EXPECT_EQ(ggml::E8m0ToFloatHalf(2), std::ldexp(1.0f, -126));
  EXPECT_EQ(ggml::E8m0ToFloatHalf(128), 1.0f);
  EXPECT_EQ(ggml::E8m0ToFloatHalf(255), std::ldexp(1.0f, 127));
}

TEST(RowEncoding, Fp8RowsGoToTheFp8Codec) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const int head_dim = 256, scale_block = 32, n_rows = 3;
  const int row_bytes = fp8::RowBytes(head_dim, scale_block);
  std::vector<uint8_t> rows(n_rows * row_bytes);
  std::vector<float> v(head_dim);
  for (int r = 0; r < n_rows; ++r) {
    for (float& x : v) x = normal(rng);
    fp8::QuantizeRow(v.data(), head_dim, scale_block, rows.data() + r * row_bytes);
  }
  std::vector<float> got(n_rows * head_dim), want(got.size());
  std::vector<uint16_t> got_bf16(got.size()), want_bf16(got.size());
  DecodeRows(RowEncoding::kFp8, rows.data(), n_rows, head_dim, scale_block, got.data());
  DecodeRows(RowEncoding::kFp8, rows.data(), n_rows, head_dim, scale_block, got_bf16.data());
  fp8::DequantizeRows(rows.data(), n_rows, head_dim, scale_block, want.data());
  fp8::DequantizeRowsBf16(rows.data(), n_rows, head_dim, scale_block, want_bf16.data());
  EXPECT_EQ(got, want);
  EXPECT_EQ(got_bf16, want_bf16);
  EXPECT_EQ(BlockValues(RowEncoding::kFp8, scale_block), 32);
  EXPECT_EQ(BlockBytes(RowEncoding::kFp8, scale_block), 33);
}

}  // namespace
}  // namespace engram
