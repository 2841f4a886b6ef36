#include "common/codec/fp8.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

// f32 bits -> bf16 bits, round to nearest even; NaN kept quiet.
constexpr uint16_t Bf16FromBits(uint32_t u) {
  uint32_t bf16 = 0;
  RoundToBf16Bits(u, &bf16);
  return static_cast<uint16_t>(bf16);
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

uint16_t FloatToBf16(float x) { return Bf16FromBits(std::bit_cast<uint32_t>(x)); }

void DequantizeRows(const uint8_t* rows, size_t n_rows, int head_dim, int scale_block, float* out) {
  const int n_blocks = head_dim / scale_block;
  const size_t row_bytes = static_cast<size_t>(head_dim) + n_blocks;
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* codes = rows + r * row_bytes;
    const uint8_t* scales = codes + head_dim;
    float* o = out + r * head_dim;
    for (int b = 0; b < n_blocks; ++b) {
      const float s = E8m0Scale(scales[b]);
      const uint8_t* c = codes + b * scale_block;
      float* ob = o + b * scale_block;
      for (int j = 0; j < scale_block; ++j) ob[j] = kE4m3Table[c[j]] * s;
    }
  }
}

// bf16 dequantisation.
//
// The definition is FloatToBf16(E4m3ToFloat(code) * E8m0ToFloat(e)). For a
// scale byte e in [kFastScaleMin, kFastScaleMax] every such product is zero,
// NaN (0x7FC0) or a normal f32 with at most 4 significant bits, so the
// rounding to bf16 is exact and the bits follow from the code by integer
// arithmetic: the bf16 of |e4m3(code)| (a normal number in bf16) plus
// (e - 127) << 7 in the exponent field, then the sign; codes 0x00/0x80 give
// +0 and 0x7F/0xFF give 0x7FC0. Blocks with any other scale (results
// subnormal, infinite or NaN) take the exact scalar path.
namespace {

constexpr int kFastScaleMin = 10;   // 2^-9 * 2^(10-127) = 2^-126
constexpr int kFastScaleMax = 246;  // 448 * 2^(246-127) < 2^128

inline bool IsFastScale(uint8_t e) { return e >= kFastScaleMin && e <= kFastScaleMax; }

// Added to the bf16 bits of a positive e4m3 value at scale 2^0 to scale it
// by 2^(e-127); meaningful only for a fast scale e.
inline uint16_t Bf16ScaleOffset(uint8_t e) { return static_cast<uint16_t>((e - 127) << 7); }

// out[j] = the definition, for codes[0..n); any scale.
void Bf16Exact(const uint8_t* codes, int n, uint8_t e, uint16_t* out) {
  const float s = E8m0Scale(e);
  for (int j = 0; j < n; ++j) {
    out[j] = Bf16FromBits(std::bit_cast<uint32_t>(kE4m3Table[codes[j]] * s));
  }
}

// Vector extension types, `N` lanes of 16 bits.
template <int N>
struct Lanes {
  typedef uint8_t Bytes __attribute__((vector_size(N)));
  typedef uint16_t Words __attribute__((vector_size(2 * N)));
  typedef int16_t Signed __attribute__((vector_size(2 * N)));
};

// out[0..N) = the definition for codes[0..N) at a fast scale whose
// Bf16ScaleOffset is `offset`.
template <int N>
[[gnu::always_inline]] inline void Bf16FastLanes(const uint8_t* codes, uint16_t offset,
                                                 uint16_t* out) {
  using Words = typename Lanes<N>::Words;
  using Signed = typename Lanes<N>::Signed;
  typename Lanes<N>::Bytes bytes;
  std::memcpy(&bytes, codes, sizeof bytes);
  const Words c = __builtin_convertvector(bytes, Words);
  const Words c7 = c & 0x7F;
  const Signed m = __builtin_bit_cast(Signed, c7);  // 0..127; signed compares
  // bf16(|e4m3|) - (120 << 7): c7 << 4 for a normal code (exponent field
  // 1..15 becomes 121..135); a subnormal code m * 2^-9, m = 1..7, gives
  // -256, -128, -64, 0, 32, 64, 96.
  const Words subnormal = m > 3 ? (c7 << 5) - 128 : (m > 1 ? (c7 << 6) - 256 : Words{} - 256);
  const uint16_t bias = static_cast<uint16_t>(offset + (120 << 7));
  Words v = (m > 7 ? c7 << 4 : subnormal) + bias;
  v |= (c & 0x80) << 8;
  v = m == 0 ? Words{} : v;
  v = m == 0x7F ? Words{} + 0x7FC0 : v;
  std::memcpy(out, &v, sizeof v);
}

// The row loop of the vector extension kernels: N codes at a time through
// Bf16FastLanes, then Bf16Exact for each block's last block % N codes and
// for the blocks whose scale is not fast. kBlock is scale_block when it is a
// compile-time constant, else 0.
template <int N, int kBlock>
[[gnu::always_inline]] inline void DequantizeBf16LanesRows(const uint8_t* rows, size_t n_rows,
                                                           int head_dim, int scale_block,
                                                           uint16_t* out) {
  const int block = kBlock != 0 ? kBlock : scale_block;
  const int n_blocks = head_dim / block;
  const size_t row_bytes = static_cast<size_t>(head_dim) + n_blocks;
  const int full = block - block % N;
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* codes = rows + r * row_bytes;
    const uint8_t* scales = codes + head_dim;
    uint16_t* o = out + r * head_dim;
    bool all_fast = true;
    for (int b = 0; b < n_blocks; ++b) {
      all_fast &= IsFastScale(scales[b]);
      const uint16_t offset = Bf16ScaleOffset(scales[b]);
      for (int j = 0; j < full; j += N) {
        Bf16FastLanes<N>(codes + b * block + j, offset, o + b * block + j);
      }
    }
    if (all_fast && full == block) continue;
    for (int b = 0; b < n_blocks; ++b) {
      const int j = IsFastScale(scales[b]) ? full : 0;
      Bf16Exact(codes + b * block + j, block - j, scales[b], o + b * block + j);
    }
  }
}

template <int N>
[[gnu::always_inline]] inline void DequantizeBf16Lanes(const uint8_t* rows, size_t n_rows,
                                                       int head_dim, int scale_block,
                                                       uint16_t* out) {
  if (scale_block == 32) {
    DequantizeBf16LanesRows<N, 32>(rows, n_rows, head_dim, 32, out);
  } else {
    DequantizeBf16LanesRows<N, 0>(rows, n_rows, head_dim, scale_block, out);
  }
}

void DequantizeBf16Portable(const uint8_t* rows, size_t n_rows, int head_dim, int scale_block,
                            uint16_t* out) {
  DequantizeBf16Lanes<8>(rows, n_rows, head_dim, scale_block, out);
}

#if defined(__x86_64__)

__attribute__((target("avx2"))) void DequantizeBf16Avx2(const uint8_t* rows, size_t n_rows,
                                                        int head_dim, int scale_block,
                                                        uint16_t* out) {
  DequantizeBf16Lanes<16>(rows, n_rows, head_dim, scale_block, out);
}

// bf16 bits of e4m3(c) for c = 0..127 (scale 2^0; 0x7F is 0x7FC0).
struct Bf16MagnitudeTable {
  alignas(64) uint16_t v[128];
};
constexpr Bf16MagnitudeTable MakeBf16MagnitudeTable() {
  Bf16MagnitudeTable t{};
  for (int c = 0; c < 128; ++c) {
    t.v[c] = Bf16FromBits(std::bit_cast<uint32_t>(kE4m3Table[c]));
  }
  return t;
}
constexpr Bf16MagnitudeTable kBf16Magnitude = MakeBf16MagnitudeTable();

#define ENGRAM_AVX512 __attribute__((target("avx512bw,avx512vl")))

// kBf16Magnitude in four registers, and the constants Bf16Avx512Lanes uses.
struct Avx512Consts {
  __m512i table[4], k7F, k40, k80;
};

// The bf16 of 32 codes (zero-extended to 16 bits) at a fast scale: two
// 64-entry vpermt2w lookups of kBf16Magnitude, then the scale offset and the
// sign on the lanes that are neither zero nor NaN.
[[gnu::always_inline]] ENGRAM_AVX512 inline __m512i Bf16Avx512Lanes(__m512i code,
                                                                    const Avx512Consts& k,
                                                                    __m512i offset) {
  const __m512i c7 = _mm512_and_si512(code, k.k7F);
  const __m512i lo = _mm512_permutex2var_epi16(k.table[0], c7, k.table[1]);
  const __m512i hi = _mm512_permutex2var_epi16(k.table[2], c7, k.table[3]);
  const __m512i v = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(c7, k.k40), lo, hi);
  const __mmask32 live = _mm512_test_epi16_mask(c7, c7) & _mm512_cmpneq_epi16_mask(c7, k.k7F);
  const __m512i sign = _mm512_maskz_slli_epi16(live, _mm512_and_si512(code, k.k80), 8);
  return _mm512_or_si512(_mm512_mask_add_epi16(v, live, v, offset), sign);
}

// 32 codes per step; a block's last partial step is masked, so any block
// size works. kBlock is scale_block when it is a compile-time constant (so
// the block loop has no inner loop), else 0. Every block goes through the
// lanes; the few whose scale is not fast are then redone by Bf16Exact, which
// keeps the call out of the hot loop.
template <int kBlock>
[[gnu::always_inline]] ENGRAM_AVX512 inline void DequantizeBf16Avx512Rows(
    const uint8_t* rows, size_t n_rows, int head_dim, int scale_block, uint16_t* out) {
  const int block = kBlock != 0 ? kBlock : scale_block;
  const Avx512Consts k = {
      {_mm512_load_si512(kBf16Magnitude.v), _mm512_load_si512(kBf16Magnitude.v + 32),
       _mm512_load_si512(kBf16Magnitude.v + 64), _mm512_load_si512(kBf16Magnitude.v + 96)},
      _mm512_set1_epi16(0x7F),
      _mm512_set1_epi16(0x40),
      _mm512_set1_epi16(0x80)};
  const int n_blocks = head_dim / block;
  const size_t row_bytes = static_cast<size_t>(head_dim) + n_blocks;
  const int full = block & ~31;
  const __mmask32 tail = (1u << (block - full)) - 1;
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* codes = rows + r * row_bytes;
    const uint8_t* scales = codes + head_dim;
    uint16_t* o = out + r * head_dim;
    bool all_fast = true;
    for (int b = 0; b < n_blocks; ++b) {
      all_fast &= IsFastScale(scales[b]);
      const __m512i offset = _mm512_set1_epi16(static_cast<int16_t>(Bf16ScaleOffset(scales[b])));
      const uint8_t* c = codes + b * block;
      uint16_t* ob = o + b * block;
      for (int j = 0; j < full; j += 32) {
        const __m512i code =
            _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + j)));
        _mm512_storeu_si512(ob + j, Bf16Avx512Lanes(code, k, offset));
      }
      if (tail != 0) {
        const __m512i code = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(tail, c + full));
        _mm512_mask_storeu_epi16(ob + full, tail, Bf16Avx512Lanes(code, k, offset));
      }
    }
    if (all_fast) continue;
    for (int b = 0; b < n_blocks; ++b) {
      if (IsFastScale(scales[b])) continue;
      Bf16Exact(codes + b * block, block, scales[b], o + b * block);
    }
  }
}

ENGRAM_AVX512 void DequantizeBf16Avx512(const uint8_t* rows, size_t n_rows, int head_dim,
                                        int scale_block, uint16_t* out) {
  if (scale_block == 32) {
    DequantizeBf16Avx512Rows<32>(rows, n_rows, head_dim, 32, out);
  } else {
    DequantizeBf16Avx512Rows<0>(rows, n_rows, head_dim, scale_block, out);
  }
}

#undef ENGRAM_AVX512

#endif  // defined(__x86_64__)

internal::Bf16Kernel BestBf16Kernel() {
  using internal::Bf16Kernel;
  for (Bf16Kernel k : {Bf16Kernel::kAvx512, Bf16Kernel::kAvx2}) {
    if (internal::Bf16KernelSupported(k)) return k;
  }
  return Bf16Kernel::kPortable;
}

}  // namespace

void DequantizeRowsBf16(const uint8_t* rows, size_t n_rows, int head_dim, int scale_block,
                        uint16_t* out) {
  static const internal::Bf16Kernel kernel = BestBf16Kernel();
  internal::DequantizeRowsBf16With(kernel, rows, n_rows, head_dim, scale_block, out);
}

namespace internal {

bool Bf16KernelSupported(Bf16Kernel kernel) {
  switch (kernel) {
    case Bf16Kernel::kPortable:
      return true;
#if defined(__x86_64__)
    case Bf16Kernel::kAvx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2");
    case Bf16Kernel::kAvx512:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#endif
    default:
      return false;
  }
}

void DequantizeRowsBf16With(Bf16Kernel kernel, const uint8_t* rows, size_t n_rows, int head_dim,
                            int scale_block, uint16_t* out) {
  switch (kernel) {
#if defined(__x86_64__)
    case Bf16Kernel::kAvx512:
      return DequantizeBf16Avx512(rows, n_rows, head_dim, scale_block, out);
    case Bf16Kernel::kAvx2:
      return DequantizeBf16Avx2(rows, n_rows, head_dim, scale_block, out);
#endif
    default:
      return DequantizeBf16Portable(rows, n_rows, head_dim, scale_block, out);
  }
}

}  // namespace internal

void QuantizeRow(const float* values, int head_dim, int scale_block, uint8_t* out_row) {
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
