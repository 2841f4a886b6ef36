#include "common/fp8.h"

#include <bit>
#include <cmath>
#include <limits>

namespace engram::fp8 {
namespace {

constexpr std::array<float, 256> MakeE4m3Table() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 15;
    const int m = c & 7;
    if (e == 15 && m == 7) {
      t[c] = std::numeric_limits<float>::quiet_NaN();  // 0x7FC00000, both signs
      continue;
    }
    float v;
    if (e == 0) {
      v = static_cast<float>(m) * (1.0f / 512.0f);  // m * 2^-9
    } else {
      v = 1.0f + static_cast<float>(m) / 8.0f;
      for (int i = 7; i < e; ++i) v *= 2.0f;
      for (int i = e; i < 7; ++i) v *= 0.5f;
    }
    // 0x80 decodes to +0.0 (the golden vectors' rule), not -0.0.
    t[c] = ((c & 0x80) && v != 0.0f) ? -v : v;
  }
  return t;
}

constexpr std::array<float, 256> kE4m3Table = MakeE4m3Table();

// f32 bits -> bf16 bits, round to nearest even; NaN kept quiet. Branch-free
// so the dequantise loops vectorise.
inline uint16_t Bf16FromBits(uint32_t u) {
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan
                                                               : rounded);
}

inline float E8m0Scale(uint8_t e) {
  // 2^(e-127) for 1..254; 2^-127 is the subnormal bit pattern 0x00400000.
  const uint32_t bits = e == 0     ? 0x00400000u
                        : e == 255 ? 0x7FC00000u
                                   : static_cast<uint32_t>(e) << 23;
  return std::bit_cast<float>(bits);
}

}  // namespace

const std::array<float, 256>& E4m3Table() { return kE4m3Table; }

float E4m3ToFloat(uint8_t code) { return kE4m3Table[code]; }

uint8_t FloatToE4m3(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kE4m3NaN;              // NaN, either sign
  if (a >= 0x43E00000u) return sign | kE4m3MaxCode;  // |x| >= 448, inf
  if (a < 0x3C800000u) {
    // Below 2^-6: subnormal codes m * 2^-9, m = 0..8 (8 is the smallest
    // normal). Round |x| * 2^9 to the nearest even integer.
    const int exp = static_cast<int>(a >> 23);
    if (exp == 0) return sign;  // f32 subnormal: far below 2^-10
    const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
    const int shift = 141 - exp;   // >= 21 since exp <= 120
    if (shift >= 26) return sign;  // |x| < 2^-11: rounds to zero
    const uint32_t half = 1u << (shift - 1);
    const uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t q = mant >> shift;
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return sign | static_cast<uint8_t>(q);
  }
  // Normal: keep 3 of the 23 mantissa bits, round to nearest even (a carry
  // into the exponent is the correct result), then rebias 127 -> 7.
  a += 0x7FFFFu + ((a >> 20) & 1u);
  return sign | static_cast<uint8_t>((a >> 20) - (120u << 3));
}

float E8m0ToFloat(uint8_t e) { return E8m0Scale(e); }

uint8_t FloatToE8m0(float x) {
  if (std::isnan(x)) return kE8m0NaN;
  if (!(x > 0.0f)) return 0;
  if (std::isinf(x)) return 254;
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const int exp = static_cast<int>(u >> 23);
  const uint32_t mant = u & 0x7FFFFFu;
  if (exp == 0) {
    // x < 2^-126: choose between 2^-127 (code 0) and 2^-126 (code 1); the
    // midpoint 1.5 * 2^-127 has mantissa 0x600000; a tie goes to the even
    // exponent -126.
    return mant >= 0x600000u ? 1 : 0;
  }
  // x = 1.m * 2^k with k = exp - 127; the midpoint to 2^(k+1) is m = 0x400000.
  int k = exp - 127;
  if (mant > 0x400000u || (mant == 0x400000u && (k & 1))) ++k;
  const int code = k + 127;
  return static_cast<uint8_t>(code > 254 ? 254 : code);
}

uint16_t FloatToBf16(float x) {
  return Bf16FromBits(std::bit_cast<uint32_t>(x));
}

namespace {

// The dequantise loop for any output type; `convert` maps each f32 product
// to one output value. Inlined per caller, so the inner loop vectorises.
template <typename Out, typename Convert>
inline void DequantizeRowsAs(const uint8_t* rows, size_t n_rows, int head_dim,
                             int scale_block, Out* out, Convert convert) {
  const int n_blocks = head_dim / scale_block;
  const size_t row_bytes = static_cast<size_t>(head_dim) + n_blocks;
  const float* lut = kE4m3Table.data();
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* codes = rows + r * row_bytes;
    const uint8_t* scales = codes + head_dim;
    Out* o = out + r * head_dim;
    for (int b = 0; b < n_blocks; ++b) {
      const float s = E8m0Scale(scales[b]);
      const uint8_t* c = codes + b * scale_block;
      Out* ob = o + b * scale_block;
      for (int j = 0; j < scale_block; ++j) ob[j] = convert(lut[c[j]] * s);
    }
  }
}

}  // namespace

void DequantizeRows(const uint8_t* rows, size_t n_rows, int head_dim,
                    int scale_block, float* out) {
  DequantizeRowsAs(rows, n_rows, head_dim, scale_block, out,
                   [](float v) { return v; });
}

void DequantizeRowsBf16(const uint8_t* rows, size_t n_rows, int head_dim,
                        int scale_block, uint16_t* out) {
  DequantizeRowsAs(rows, n_rows, head_dim, scale_block, out, [](float v) {
    return Bf16FromBits(std::bit_cast<uint32_t>(v));
  });
}

void QuantizeRow(const float* values, int head_dim, int scale_block,
                 uint8_t* out_row) {
  const int n_blocks = head_dim / scale_block;
  uint8_t* scales = out_row + head_dim;
  for (int b = 0; b < n_blocks; ++b) {
    const float* v = values + b * scale_block;
    float amax = 0.0f;
    bool finite = true;
    for (int j = 0; j < scale_block; ++j) {
      const float a = std::fabs(v[j]);
      finite = finite && std::isfinite(a);
      amax = a > amax ? a : amax;
    }
    int k;  // scale = 2^k
    if (!finite) {
      k = 127;
    } else if (amax == 0.0f) {
      k = 0;
    } else {
      // amax = m * 2^e, m in [0.5, 1); 448 = 0.875 * 2^9. The smallest k
      // with amax <= 0.875 * 2^(9+k) is e-9 if m <= 0.875, else e-8.
      int e;
      const float m = std::frexp(amax, &e);
      k = m <= 0.875f ? e - 9 : e - 8;
      k = k < -127 ? -127 : (k > 127 ? 127 : k);
    }
    scales[b] = static_cast<uint8_t>(k + 127);
    const float scale = E8m0Scale(static_cast<uint8_t>(k + 127));
    uint8_t* codes = out_row + b * scale_block;
    for (int j = 0; j < scale_block; ++j) codes[j] = FloatToE4m3(v[j] / scale);
  }
}

}  // namespace engram::fp8
