#include "common/codec/fp8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace engram::fp8 {
namespace {

using nlohmann::json;

json LoadGolden() {
  const std::string path = std::string(ENGRAM_GOLDEN_DIR) + "/fp8_codec.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << path << " is not valid JSON";
  return j;
}

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t b) { return std::bit_cast<float>(b); }

TEST(Fp8Golden, E4m3DecodeAllCodes) {
  const json g = LoadGolden();
  ASSERT_TRUE(g.contains("e4m3_decode"));
  ASSERT_EQ(g["e4m3_decode"].size(), 256u);
  for (const json& c : g["e4m3_decode"]) {
    const auto code = c["code"].get<uint32_t>();
    const auto want = c["f32_bits"].get<uint32_t>();
    const float got = E4m3ToFloat(static_cast<uint8_t>(code));
    const uint32_t got_bits = std::isnan(got) ? 0x7FC00000u : Bits(got);
    EXPECT_EQ(got_bits, want) << "code " << code;
    EXPECT_EQ(Bits(E4m3Table()[code]), Bits(got));
  }
}

TEST(Fp8Golden, E4m3Encode) {
  const json g = LoadGolden();
  ASSERT_TRUE(g.contains("e4m3_encode"));
  ASSERT_GT(g["e4m3_encode"].size(), 100u);
  int failures = 0;
  for (const json& c : g["e4m3_encode"]) {
    const auto bits = c["f32_bits"].get<uint32_t>();
    const auto want = c["code"].get<uint32_t>();
    const uint8_t got = FloatToE4m3(FromBits(bits));
    if (got != want && ++failures < 20) {
      ADD_FAILURE() << "f32 bits 0x" << std::hex << bits << " (" << FromBits(bits) << "): got 0x"
                    << int{got} << ", want 0x" << want;
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(Fp8Golden, E8m0Encode) {
  const json g = LoadGolden();
  ASSERT_TRUE(g.contains("e8m0_encode"));
  ASSERT_GT(g["e8m0_encode"].size(), 100u);
  int failures = 0;
  for (const json& c : g["e8m0_encode"]) {
    const auto bits = c["f32_bits"].get<uint32_t>();
    const auto want = c["code"].get<uint32_t>();
    const uint8_t got = FloatToE8m0(FromBits(bits));
    if (got != want && ++failures < 20) {
      ADD_FAILURE() << "f32 bits 0x" << std::hex << bits << " (" << FromBits(bits) << "): got "
                    << std::dec << int{got} << ", want " << want;
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(Fp8, E4m3RoundTripsEveryFiniteCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    if (c == 0x80) {  // decodes to +0.0 (golden rule), so encodes back to 0x00
      EXPECT_EQ(FloatToE4m3(E4m3ToFloat(0x80)), 0x00);
      continue;
    }
    EXPECT_EQ(FloatToE4m3(E4m3ToFloat(static_cast<uint8_t>(c))), c) << c;
  }
  EXPECT_EQ(FloatToE4m3(std::nanf("")), 0x7F);
  EXPECT_EQ(FloatToE4m3(-INFINITY), 0xFE);
  EXPECT_EQ(FloatToE4m3(1e30f), 0x7E);
  EXPECT_EQ(FloatToE4m3(-0.0f), 0x80);
  EXPECT_EQ(FloatToE4m3(-1e-30f), 0x80);
}

TEST(Fp8, E8m0Decode) {
  EXPECT_EQ(E8m0ToFloat(127), 1.0f);
  EXPECT_EQ(E8m0ToFloat(119), 1.0f / 256);
  EXPECT_EQ(Bits(E8m0ToFloat(0)), 0x00400000u);  // 2^-127
  EXPECT_EQ(E8m0ToFloat(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(E8m0ToFloat(255)));
  for (int e = 0; e < 255; ++e) {
    EXPECT_EQ(FloatToE8m0(E8m0ToFloat(static_cast<uint8_t>(e))), e) << e;
  }
}

TEST(Fp8, Bf16Rounding) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(FromBits(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(FloatToBf16(FromBits(0x3F818000u)), 0x3F82);  // tie -> even
  EXPECT_EQ(FloatToBf16(FromBits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16(INFINITY), 0x7F80);
  EXPECT_EQ(FloatToBf16(FromBits(0x7F800001u)) & 0x7FC0, 0x7FC0);  // NaN
}

// A hand-built row: head_dim 8, scale_block 4 -> 8 codes then 2 scales.
TEST(Fp8, DequantizeHandBuiltRow) {
  const uint8_t row[10] = {0x38, 0xB8, 0x40, 0x7E,  // 1, -1, 2, 448        scale 2^-2
                           0x01, 0x00, 0x80, 0x3C,  // 2^-9, 0, -0, 1.5     scale 2^3
                           125,  130};
  const float want[8] = {0.25f, -0.25f, 0.5f, 112.0f, std::ldexp(1.0f, -6),
                         0.0f,  0.0f,   12.0f};  // 0x80 -> +0
  float f32[8];
  DequantizeRows(row, 1, 8, 4, f32);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(Bits(f32[j]), Bits(want[j])) << j;
  }
  uint16_t bf16[8];
  DequantizeRows(row, 1, 8, 4, bf16);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(bf16[j], Bits(want[j]) >> 16) << j;  // all exact in bf16
  }
}

TEST(Fp8, DequantizeManyRowsMatchesScalarPath) {
  constexpr int kHeadDim = 64, kBlock = 32, kRows = 5;
  const int rb = RowBytes(kHeadDim, kBlock);
  std::vector<uint8_t> rows(kRows * rb);
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i] = static_cast<uint8_t>(i * 37 + 11);
  }
  for (int r = 0; r < kRows; ++r) {  // sane scales
    rows[r * rb + kHeadDim] = static_cast<uint8_t>(110 + r);
    rows[r * rb + kHeadDim + 1] = static_cast<uint8_t>(140 - r);
  }
  std::vector<float> f32(kRows * kHeadDim);
  std::vector<uint16_t> bf16(kRows * kHeadDim);
  DequantizeRows(rows.data(), kRows, kHeadDim, kBlock, f32.data());
  DequantizeRowsBf16(rows.data(), kRows, kHeadDim, kBlock, bf16.data());
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < kHeadDim; ++j) {
      const float want =
          E4m3ToFloat(rows[r * rb + j]) * E8m0ToFloat(rows[r * rb + kHeadDim + j / kBlock]);
      const float got = f32[r * kHeadDim + j];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got));
        continue;
      }
      EXPECT_EQ(Bits(got), Bits(want)) << r << "," << j;
      EXPECT_EQ(bf16[r * kHeadDim + j], FloatToBf16(want)) << r << "," << j;
    }
  }
}

// The bf16 definition, one value at a time.
uint16_t WantBf16(uint8_t code, uint8_t scale) {
  return FloatToBf16(E4m3ToFloat(code) * E8m0ToFloat(scale));
}

using internal::Bf16Kernel;

// The kernels this CPU runs, each with a name for failure messages.
std::vector<std::pair<Bf16Kernel, const char*>> Bf16Kernels() {
  std::vector<std::pair<Bf16Kernel, const char*>> all = {{Bf16Kernel::kPortable, "portable"},
                                                         {Bf16Kernel::kAvx2, "avx2"},
                                                         {Bf16Kernel::kAvx512, "avx512"}};
  std::vector<std::pair<Bf16Kernel, const char*>> ok;
  for (const auto& k : all) {
    if (internal::Bf16KernelSupported(k.first)) ok.push_back(k);
  }
  return ok;
}

// Dequantises `rows` with DequantizeRowsBf16 and every kernel, into an
// output buffer starting `out_skew` elements past an aligned one, and
// counts the values that differ from WantBf16 (reporting the first few).
int CountBf16Mismatches(const uint8_t* rows, size_t n_rows, int head_dim, int scale_block,
                        int out_skew) {
  const size_t rb = RowBytes(head_dim, scale_block);
  const size_t n = n_rows * head_dim;
  std::vector<uint16_t> want(n);
  for (size_t r = 0; r < n_rows; ++r) {
    for (int j = 0; j < head_dim; ++j) {
      want[r * head_dim + j] =
          WantBf16(rows[r * rb + j], rows[r * rb + head_dim + j / scale_block]);
    }
  }
  std::vector<std::pair<Bf16Kernel, const char*>> kernels = Bf16Kernels();
  kernels.push_back({Bf16Kernel::kPortable, "DequantizeRowsBf16"});
  int failures = 0;
  for (size_t k = 0; k < kernels.size(); ++k) {
    std::vector<uint16_t> buf(n + out_skew + 1, 0xDEAD);
    uint16_t* out = buf.data() + out_skew;
    if (k + 1 == kernels.size()) {
      DequantizeRowsBf16(rows, n_rows, head_dim, scale_block, out);
    } else {
      internal::DequantizeRowsBf16With(kernels[k].first, rows, n_rows, head_dim, scale_block, out);
    }
    for (size_t i = 0; i < n; ++i) {
      if (out[i] != want[i] && ++failures <= 10) {
        const size_t r = i / head_dim;
        const int j = static_cast<int>(i % head_dim);
        ADD_FAILURE() << kernels[k].second << " head_dim " << head_dim << " block " << scale_block
                      << " row " << r << " col " << j << ": code 0x" << std::hex
                      << int{rows[r * rb + j]} << " scale 0x"
                      << int{rows[r * rb + head_dim + j / scale_block]} << ": got 0x" << out[i]
                      << ", want 0x" << want[i];
      }
    }
    // Nothing written outside out[0, n).
    for (int i = 0; i < out_skew; ++i) EXPECT_EQ(buf[i], 0xDEAD);
    EXPECT_EQ(buf[n + out_skew], 0xDEAD) << kernels[k].second;
  }
  return failures;
}

// Every code at every scale byte, in head_dim 256 rows (one row per scale,
// codes 0..255 in order) and in head_dim 64 rows (four rows per scale).
TEST(Fp8Bf16, EveryCodeAtEveryScale) {
  for (int head_dim : {256, 64}) {
    const int rb = RowBytes(head_dim, 32);
    const int rows_per_scale = 256 / head_dim;
    std::vector<uint8_t> rows(256 * rows_per_scale * rb);
    for (int e = 0; e < 256; ++e) {
      for (int q = 0; q < rows_per_scale; ++q) {
        uint8_t* row = rows.data() + (e * rows_per_scale + q) * rb;
        for (int j = 0; j < head_dim; ++j) {
          row[j] = static_cast<uint8_t>(q * head_dim + j);
        }
        for (int b = 0; b < head_dim / 32; ++b) {
          row[head_dim + b] = static_cast<uint8_t>(e);
        }
      }
    }
    EXPECT_EQ(CountBf16Mismatches(rows.data(), 256 * rows_per_scale, head_dim, 32, 0), 0);
  }
}

// Random codes and scales (the fast-path edges 9/10 and 246/247 and the
// special 0 and 255 often), any block size, several rows, misaligned input
// and output.
TEST(Fp8Bf16, BlockSizesRowsAndAlignment) {
  std::mt19937 rng(7);
  const uint8_t edge_scales[] = {0, 1, 9, 10, 11, 127, 245, 246, 247, 254, 255};
  struct Shape {
    int head_dim, scale_block;
  };
  for (const Shape& s :
       {Shape{256, 32}, Shape{64, 32}, Shape{64, 64}, Shape{96, 48}, Shape{128, 16}, Shape{40, 8},
        Shape{24, 3}, Shape{7, 1}, Shape{256, 256}}) {
    for (size_t n_rows : {1, 3, 17}) {
      for (int skew : {0, 1}) {
        const int rb = RowBytes(s.head_dim, s.scale_block);
        std::vector<uint8_t> buf(n_rows * rb + skew);
        uint8_t* rows = buf.data() + skew;
        for (size_t r = 0; r < n_rows; ++r) {
          uint8_t* row = rows + r * rb;
          for (int j = 0; j < s.head_dim; ++j) row[j] = rng() & 0xFF;
          for (int b = 0; b < s.head_dim / s.scale_block; ++b) {
            row[s.head_dim + b] =
                rng() % 3 == 0 ? edge_scales[rng() % 11] : static_cast<uint8_t>(rng() & 0xFF);
          }
        }
        EXPECT_EQ(CountBf16Mismatches(rows, n_rows, s.head_dim, s.scale_block, skew), 0)
            << s.head_dim << "/" << s.scale_block << " rows " << n_rows;
      }
    }
  }
}

TEST(Fp8Bf16, SpecialCodes) {
  EXPECT_EQ(WantBf16(0x80, 127), 0x0000);  // -0 decodes to +0
  EXPECT_EQ(WantBf16(0x00, 255), 0x7FC0);  // NaN scale
  EXPECT_EQ(WantBf16(0xFF, 127), 0x7FC0);  // NaN code keeps no sign
  EXPECT_EQ(WantBf16(0x7E, 254), 0x7F80);  // 448 * 2^127 overflows
  EXPECT_EQ(WantBf16(0xFE, 247), 0xFF80);
  EXPECT_EQ(WantBf16(0x01, 0), 0x0000);  // 2^-136 rounds to 0 in bf16
  for (const auto& k : Bf16Kernels()) {
    SCOPED_TRACE(k.second);
    const uint8_t row[3] = {0x01, 0x7E, 9};  // head_dim 2, one block
    uint16_t out[2];
    internal::DequantizeRowsBf16With(k.first, row, 1, 2, 2, out);
    EXPECT_EQ(out[0], WantBf16(0x01, 9));  // 2^-127: a bf16 subnormal
    EXPECT_EQ(out[1], WantBf16(0x7E, 9));
  }
}

TEST(Fp8, QuantizeRowRoundTrip) {
  constexpr int kHeadDim = 64, kBlock = 32;
  float v[kHeadDim];
  for (int j = 0; j < kHeadDim; ++j) {
    v[j] = std::sin(static_cast<float>(j)) * (j < kBlock ? 0.01f : 300.0f);
  }
  uint8_t row[RowBytes(kHeadDim, kBlock)];
  QuantizeRow(v, kHeadDim, kBlock, row);
  float amax0 = 0, amax1 = 0;
  for (int j = 0; j < kBlock; ++j) amax0 = std::max(amax0, std::fabs(v[j]));
  for (int j = kBlock; j < kHeadDim; ++j) {
    amax1 = std::max(amax1, std::fabs(v[j]));
  }
  // Smallest power of two keeping amax / scale <= 448.
  for (int b = 0; b < 2; ++b) {
    const float amax = b == 0 ? amax0 : amax1;
    const float s = E8m0ToFloat(row[kHeadDim + b]);
    EXPECT_LE(amax / s, 448.0f);
    EXPECT_GT(amax / (s / 2), 448.0f);
  }
  float back[kHeadDim];
  DequantizeRows(row, 1, kHeadDim, kBlock, back);
  for (int j = 0; j < kHeadDim; ++j) {
    const float s = E8m0ToFloat(row[kHeadDim + j / kBlock]);
    // Relative error of e4m3 is <= 2^-4; absolute floor from subnormals.
    EXPECT_NEAR(back[j], v[j], std::fabs(v[j]) / 16 + s / 1024) << j;
  }
  float zeros[kHeadDim] = {};
  QuantizeRow(zeros, kHeadDim, kBlock, row);
  EXPECT_EQ(row[kHeadDim], 127);
  for (int j = 0; j < kHeadDim; ++j) EXPECT_EQ(row[j], 0);
}

}  // namespace
}  // namespace engram::fp8
