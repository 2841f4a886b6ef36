#include "common/fp8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
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
      ADD_FAILURE() << "f32 bits 0x" << std::hex << bits << " ("
                    << FromBits(bits) << "): got 0x" << int{got} << ", want 0x"
                    << want;
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
      ADD_FAILURE() << "f32 bits 0x" << std::hex << bits << " ("
                    << FromBits(bits) << "): got " << std::dec << int{got}
                    << ", want " << want;
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
  const uint8_t row[10] = {
      0x38, 0xB8, 0x40, 0x7E,  // 1, -1, 2, 448        scale 2^-2
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
      const float want = E4m3ToFloat(rows[r * rb + j]) *
                         E8m0ToFloat(rows[r * rb + kHeadDim + j / kBlock]);
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
