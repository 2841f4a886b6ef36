#include "common/codec/ggml_blocks.h"

#include <bit>
#include <cstring>
#include <type_traits>

#include "common/codec/fp8.h"

namespace engram::ggml {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF fields are read in place");

// Vector extension types of N lanes. Kernels keep them in locals and hand
// them to helpers by reference only (see fp8::RoundToBf16Bits); casts are
// __builtin_bit_cast, not std::bit_cast, for the same reason.
template <int N>
struct Lanes {
  typedef uint8_t Bytes __attribute__((vector_size(N)));
  typedef int8_t SignedBytes __attribute__((vector_size(N)));
  typedef uint16_t UShorts __attribute__((vector_size(2 * N)));
  typedef int16_t Shorts __attribute__((vector_size(2 * N)));
  typedef int32_t Ints __attribute__((vector_size(4 * N)));
  typedef uint32_t Words __attribute__((vector_size(4 * N)));
  typedef float Floats __attribute__((vector_size(4 * N)));
};

// The f32 bits of the f16 bits in `h` (the low 16 bits of each lane):
// exact; a NaN gets the quiet bit. U is uint32_t with F float, or
// Lanes<N>::Words with F Lanes<N>::Floats.
template <typename F, typename U>
[[gnu::always_inline]] inline void HalfToFloatBits(const U& h, U* out) {
  const U em = h & 0x7FFFu;  // exponent and mantissa
  const U shifted = em << 13;
  const U normal = shifted + (112u << 23);  // exponent bias 15 -> 127
  const U special = shifted | (em > 0x7C00u ? U{} + 0x7FC00000u : U{} + 0x7F800000u);
  // A subnormal m * 2^-24 is (1 + m/1024) * 2^-14 - 2^-14, exactly.
  const U subnormal =
      __builtin_bit_cast(U, __builtin_bit_cast(F, shifted | (113u << 23)) - 0x1p-14f);
  const U magnitude = em < 0x400u ? subnormal : (em < 0x7C00u ? normal : special);
  *out = magnitude | ((h & 0x8000u) << 16);
}

inline float HalfToFloat(uint16_t h) {
  uint32_t bits = 0;
  HalfToFloatBits<float>(uint32_t{h}, &bits);
  return std::bit_cast<float>(bits);
}

// The little-endian f16 at p, as f32.
inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return HalfToFloat(h);
}

// ggml's kvalues_mxfp4: the e2m1 value of each code, doubled.
constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// kMxfp4Values[c] for the code c (0..15) in each lane, by arithmetic so that
// it vectorises. I is int or Lanes<N>::Ints.
template <typename I>
[[gnu::always_inline]] constexpr void Mxfp4Value(const I& c, I* out) {
  const I m = c & 7;
  const I magnitude = m < 4 ? m : (m < 6 ? 2 * m - 4 : 4 * m - 16);
  *out = (c & 8) != 0 ? -magnitude : magnitude;
}

constexpr bool Mxfp4ValueIsTable() {
  for (int c = 0; c < 16; ++c) {
    int v = 0;
    Mxfp4Value(c, &v);
    if (v != kMxfp4Values[c]) return false;
  }
  return true;
}
static_assert(Mxfp4ValueIsTable());

// The 6-bit scale and min `j` (0..7) of a Q4_K/Q5_K block's 12 packed bytes:
// j < 4 in the low 6 bits of bytes j and j + 4; j >= 4 in the nibbles of
// byte j + 4, with the top two bits in bytes j - 4 (scale) and j (min).
inline void ScaleMinK4(int j, const uint8_t* packed, int* scale, int* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = (packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4);
    *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

// The 16 6-bit scales of a Q3_K block's 12 packed bytes, less 32: low
// nibbles in bytes 0..7 (scales 0..7) and their high nibbles (8..15); the
// top two bits of scale j in byte 8 + j % 4, at bit 2 * (j / 4).
inline void Q3KScales(const uint8_t* packed, int* scales) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = (low | (high << 4)) - 32;
  }
}

// y[0..N) = the f32 lanes of v, as they are or rounded to bf16.
template <int N>
[[gnu::always_inline]] inline void Store(const typename Lanes<N>::Floats& v, float* y) {
  std::memcpy(y, &v, sizeof v);
}
template <int N>
[[gnu::always_inline]] inline void Store(const typename Lanes<N>::Floats& v, uint16_t* y) {
  using L = Lanes<N>;
  typename L::Words bf16;
  fp8::RoundToBf16Bits(__builtin_bit_cast(typename L::Words, v), &bf16);
  const typename L::UShorts halves = __builtin_convertvector(bf16, typename L::UShorts);
  std::memcpy(y, &halves, sizeof halves);
}
inline void StoreOne(float v, float* y) { *y = v; }
inline void StoreOne(float v, uint16_t* y) { *y = fp8::FloatToBf16(v); }

// q = p[0..N) zero-extended (LoadSignedBytes: sign-extended) to 32-bit
// lanes. Widened in two steps: GCC 12 lowers a 4x __builtin_convertvector
// one lane at a time, a 2x one to vector unpacks.
template <int N>
[[gnu::always_inline]] inline void LoadBytes(const uint8_t* p, typename Lanes<N>::Ints* q) {
  typename Lanes<N>::Bytes b;
  std::memcpy(&b, p, sizeof b);
  *q = __builtin_convertvector(__builtin_convertvector(b, typename Lanes<N>::UShorts),
                               typename Lanes<N>::Ints);
}
template <int N>
[[gnu::always_inline]] inline void LoadSignedBytes(const uint8_t* p, typename Lanes<N>::Ints* q) {
  typename Lanes<N>::SignedBytes b;
  std::memcpy(&b, p, sizeof b);
  *q = __builtin_convertvector(__builtin_convertvector(b, typename Lanes<N>::Shorts),
                               typename Lanes<N>::Ints);
}

// y[0..N) = scale * q - offset, lane by lane, each operation rounded as
// ggml's `d * q - m` (the product is exact in every caller).
template <int N, typename Out>
[[gnu::always_inline]] inline void StoreScaled(float scale, const typename Lanes<N>::Ints& q,
                                               float offset, Out* y) {
  Store<N>(scale * __builtin_convertvector(q, typename Lanes<N>::Floats) - offset, y);
}
// y[0..N) = scale * q (ggml writes `q * d`: the same product).
template <int N, typename Out>
[[gnu::always_inline]] inline void StoreScaled(float scale, const typename Lanes<N>::Ints& q,
                                               Out* y) {
  Store<N>(scale * __builtin_convertvector(q, typename Lanes<N>::Floats), y);
}

// The block kernels: nb consecutive blocks at x into y[0..nb * values).
// Each follows its dequantize_row_* in the order values are written.

// Q8_0: f16 d, int8 q[32]; y = q * d.
template <int N, typename Out>
[[gnu::always_inline]] inline void Q8_0Blocks(const uint8_t* x, int64_t nb, Out* y) {
  for (int64_t i = 0; i < nb; ++i, x += 34, y += 32) {
    const float d = HalfAt(x);
    for (int l = 0; l < 32; l += N) {
      typename Lanes<N>::Ints q;
      LoadSignedBytes<N>(x + 2 + l, &q);
      StoreScaled<N>(d, q, y + l);
    }
  }
}

// MXFP4: e8m0 e, then 16 bytes whose low nibbles are codes 0..15 and high
// nibbles codes 16..31; y = kvalues_mxfp4[code] * 2^(e-128).
template <int N, typename Out>
[[gnu::always_inline]] inline void Mxfp4Blocks(const uint8_t* x, int64_t nb, Out* y) {
  for (int64_t i = 0; i < nb; ++i, x += 17, y += 32) {
    const float d = E8m0ToFloatHalf(x[0]);
    for (int l = 0; l < 16; l += N) {
      typename Lanes<N>::Ints c, v;
      LoadBytes<N>(x + 1 + l, &c);
      Mxfp4Value(c & 15, &v);
      StoreScaled<N>(d, v, y + l);
      Mxfp4Value(c >> 4, &v);
      StoreScaled<N>(d, v, y + 16 + l);
    }
  }
}

// Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], f16 d,
// dmin. Values 128n + 32j + 16h + l are bits 2j of qs[32n + 16h + l],
// scaled by scales[8n + 2j + h]: y = d * sc * q - dmin * m.
template <int N, typename Out>
[[gnu::always_inline]] inline void Q2KBlocks(const uint8_t* x, int64_t nb, Out* y) {
  for (int64_t i = 0; i < nb; ++i, x += 84) {
    const uint8_t* scales = x;
    const float d = HalfAt(x + 80);
    const float dmin = HalfAt(x + 82);
    for (int n = 0; n < 2; ++n) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int h = 0; h < 2; ++h, y += 16) {
          const uint8_t sc = *scales++;
          const float dl = d * static_cast<float>(sc & 0xF);
          const float ml = dmin * static_cast<float>(sc >> 4);
          const uint8_t* q = x + 16 + 32 * n + 16 * h;
          for (int l = 0; l < 16; l += N) {
            typename Lanes<N>::Ints v;
            LoadBytes<N>(q + l, &v);
            StoreScaled<N>(dl, (v >> shift) & 3, ml, y + l);
          }
        }
      }
    }
  }
}

// Q3_K: hmask[32], qs[64], 12 bytes of 6-bit scales, f16 d. Values
// 128n + 32j + 16h + l are bits 2j of qs[32n + 16h + l], less 4 unless bit
// 4n + j of hmask[16h + l] is set, scaled by d * (scale[8n + 2j + h] - 32).
template <int N, typename Out>
[[gnu::always_inline]] inline void Q3KBlocks(const uint8_t* x, int64_t nb, Out* y) {
  for (int64_t i = 0; i < nb; ++i, x += 110) {
    int scales[16];
    Q3KScales(x + 96, scales);
    const float d = HalfAt(x + 108);
    int is = 0;
    for (int n = 0; n < 2; ++n) {
      for (int j = 0; j < 4; ++j) {
        for (int h = 0; h < 2; ++h, y += 16) {
          const float dl = d * static_cast<float>(scales[is++]);
          const uint8_t* q = x + 32 + 32 * n + 16 * h;
          const uint8_t* hm = x + 16 * h;
          for (int l = 0; l < 16; l += N) {
            typename Lanes<N>::Ints v, high;
            LoadBytes<N>(q + l, &v);
            LoadBytes<N>(hm + l, &high);
            StoreScaled<N>(dl, ((v >> (2 * j)) & 3) + (((high >> (4 * n + j)) & 1) << 2) - 4,
                           y + l);
          }
        }
      }
    }
  }
}

// Q4_K (hbits false): f16 d, dmin, 12 bytes of 6-bit scales and mins,
// qs[128]. Q5_K (hbits true): the same, then qh[32] before qs. Values
// 64c + l (l < 32) are the low nibbles of qs[32c + l], 64c + 32 + l the high
// ones, with 16 added where bit 2c (2c + 1) of qh[l] is set; scaled by scale
// and min 2c (2c + 1): y = d * sc * q - dmin * m.
template <int N, bool kHighBits, typename Out>
[[gnu::always_inline]] inline void QK4Blocks(const uint8_t* x, int64_t nb, Out* y) {
  constexpr int kBlockBytes = kHighBits ? 176 : 144;
  for (int64_t i = 0; i < nb; ++i, x += kBlockBytes) {
    const float d = HalfAt(x);
    const float dmin = HalfAt(x + 2);
    const uint8_t* packed = x + 4;
    const uint8_t* qh = x + 16;
    const uint8_t* qs = x + (kHighBits ? 48 : 16);
    for (int c = 0; c < 4; ++c, y += 64) {
      int sc, m;
      ScaleMinK4(2 * c, packed, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      ScaleMinK4(2 * c + 1, packed, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; l += N) {
        typename Lanes<N>::Ints v, high;
        LoadBytes<N>(qs + 32 * c + l, &v);
        typename Lanes<N>::Ints lo = v & 0xF, hi = v >> 4;
        if constexpr (kHighBits) {
          LoadBytes<N>(qh + l, &high);
          lo += ((high >> (2 * c)) & 1) << 4;
          hi += ((high >> (2 * c + 1)) & 1) << 4;
        }
        StoreScaled<N>(d1, lo, m1, y + l);
        StoreScaled<N>(d2, hi, m2, y + 32 + l);
      }
    }
  }
}

// Q6_K: ql[128], qh[64], int8 scales[16], f16 d. Value 128n + 32g + l
// (l < 32) is a nibble of ql[64n + 32 (g & 1) + l] (low for g < 2) with bits
// 2g of qh[32n + l] above it, less 32, scaled by d * scales[8n + 2g + l/16]
// (that product first, as ggml's `d * sc * q`).
template <int N, typename Out>
[[gnu::always_inline]] inline void Q6KBlocks(const uint8_t* x, int64_t nb, Out* y) {
  for (int64_t i = 0; i < nb; ++i, x += 210) {
    const float d = HalfAt(x + 208);
    for (int n = 0; n < 2; ++n) {
      for (int g = 0; g < 4; ++g) {
        for (int h = 0; h < 2; ++h, y += 16) {
          const float ds = d * static_cast<float>(static_cast<int8_t>(x[192 + 8 * n + 2 * g + h]));
          const uint8_t* ql = x + 64 * n + 32 * (g & 1) + 16 * h;
          const uint8_t* qh = x + 128 + 32 * n + 16 * h;
          for (int l = 0; l < 16; l += N) {
            typename Lanes<N>::Ints v, high;
            LoadBytes<N>(ql + l, &v);
            LoadBytes<N>(qh + l, &high);
            const typename Lanes<N>::Ints low = g < 2 ? v & 0xF : v >> 4;
            StoreScaled<N>(ds, (low | (((high >> (2 * g)) & 3) << 4)) - 32, y + l);
          }
        }
      }
    }
  }
}

// F16, BF16 and F32 values: k of them, any k.
template <int N, typename Out>
[[gnu::always_inline]] inline void F16Values(const uint8_t* x, int64_t k, Out* y) {
  using L = Lanes<N>;
  int64_t i = 0;
  for (; i + N <= k; i += N) {
    typename L::UShorts h;
    std::memcpy(&h, x + 2 * i, sizeof h);
    typename L::Words bits;
    HalfToFloatBits<typename L::Floats>(__builtin_convertvector(h, typename L::Words), &bits);
    Store<N>(__builtin_bit_cast(typename L::Floats, bits), y + i);
  }
  for (; i < k; ++i) StoreOne(HalfAt(x + 2 * i), y + i);
}

template <int N, typename Out>
[[gnu::always_inline]] inline void Bf16Values(const uint8_t* x, int64_t k, Out* y) {
  using L = Lanes<N>;
  int64_t i = 0;
  for (; i + N <= k; i += N) {
    typename L::UShorts h;
    std::memcpy(&h, x + 2 * i, sizeof h);
    const typename L::Words bits = __builtin_convertvector(h, typename L::Words) << 16;
    Store<N>(__builtin_bit_cast(typename L::Floats, bits), y + i);
  }
  for (; i < k; ++i) {
    uint16_t h;
    std::memcpy(&h, x + 2 * i, sizeof h);
    StoreOne(std::bit_cast<float>(uint32_t{h} << 16), y + i);
  }
}

template <int N, typename Out>
[[gnu::always_inline]] inline void F32Values(const uint8_t* x, int64_t k, Out* y) {
  if constexpr (std::is_same_v<Out, float>) {
    std::memcpy(y, x, static_cast<size_t>(k) * sizeof(float));
  } else {
    int64_t i = 0;
    for (; i + N <= k; i += N) {
      typename Lanes<N>::Floats v;
      std::memcpy(&v, x + 4 * i, sizeof v);
      Store<N>(v, y + i);
    }
    for (; i < k; ++i) {
      float v;
      std::memcpy(&v, x + 4 * i, sizeof v);
      StoreOne(v, y + i);
    }
  }
}

template <int N, typename Out>
[[gnu::always_inline]] inline void DequantizeLanes(Type t, const uint8_t* x, int64_t k, Out* y) {
  switch (t) {
    case Type::kQ8_0:
      return Q8_0Blocks<N>(x, k / 32, y);
    case Type::kMxfp4:
      return Mxfp4Blocks<N>(x, k / 32, y);
    case Type::kQ2_K:
      return Q2KBlocks<N>(x, k / 256, y);
    case Type::kQ3_K:
      return Q3KBlocks<N>(x, k / 256, y);
    case Type::kQ4_K:
      return QK4Blocks<N, false>(x, k / 256, y);
    case Type::kQ5_K:
      return QK4Blocks<N, true>(x, k / 256, y);
    case Type::kQ6_K:
      return Q6KBlocks<N>(x, k / 256, y);
    case Type::kF16:
      return F16Values<N>(x, k, y);
    case Type::kBf16:
      return Bf16Values<N>(x, k, y);
    case Type::kF32:
      return F32Values<N>(x, k, y);
  }
}

// The kernels: DequantizeLanes compiled for each vector width.
void DequantizePortable(Type t, const uint8_t* x, int64_t k, float* y) {
  DequantizeLanes<4>(t, x, k, y);
}
void DequantizePortable(Type t, const uint8_t* x, int64_t k, uint16_t* y) {
  DequantizeLanes<4>(t, x, k, y);
}

#if defined(__x86_64__)
#define ENGRAM_AVX2 __attribute__((target("avx2")))
#define ENGRAM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

ENGRAM_AVX2 void DequantizeAvx2(Type t, const uint8_t* x, int64_t k, float* y) {
  DequantizeLanes<8>(t, x, k, y);
}
ENGRAM_AVX2 void DequantizeAvx2(Type t, const uint8_t* x, int64_t k, uint16_t* y) {
  DequantizeLanes<8>(t, x, k, y);
}
ENGRAM_AVX512 void DequantizeAvx512(Type t, const uint8_t* x, int64_t k, float* y) {
  DequantizeLanes<16>(t, x, k, y);
}
ENGRAM_AVX512 void DequantizeAvx512(Type t, const uint8_t* x, int64_t k, uint16_t* y) {
  DequantizeLanes<16>(t, x, k, y);
}

#undef ENGRAM_AVX2
#undef ENGRAM_AVX512
#endif  // defined(__x86_64__)

template <typename Out>
void DequantizeWith(internal::Kernel kernel, Type t, const uint8_t* x, int64_t k, Out* y) {
  switch (kernel) {
#if defined(__x86_64__)
    case internal::Kernel::kAvx512:
      return DequantizeAvx512(t, x, k, y);
    case internal::Kernel::kAvx2:
      return DequantizeAvx2(t, x, k, y);
#endif
    default:
      return DequantizePortable(t, x, k, y);
  }
}

internal::Kernel BestKernel() {
  using internal::Kernel;
  for (Kernel k : {Kernel::kAvx512, Kernel::kAvx2}) {
    if (internal::KernelSupported(k)) return k;
  }
  return Kernel::kPortable;
}

}  // namespace

int BlockValues(Type t) {
  switch (t) {
    case Type::kQ8_0:
    case Type::kMxfp4:
      return 32;
    case Type::kQ2_K:
    case Type::kQ3_K:
    case Type::kQ4_K:
    case Type::kQ5_K:
    case Type::kQ6_K:
      return 256;
    case Type::kF32:
    case Type::kF16:
    case Type::kBf16:
      return 1;
  }
  return 0;
}

int BlockBytes(Type t) {
  switch (t) {
    case Type::kF32:
      return 4;
    case Type::kF16:
    case Type::kBf16:
      return 2;
    case Type::kQ8_0:
      return 34;
    case Type::kMxfp4:
      return 17;
    case Type::kQ2_K:
      return 84;
    case Type::kQ3_K:
      return 110;
    case Type::kQ4_K:
      return 144;
    case Type::kQ5_K:
      return 176;
    case Type::kQ6_K:
      return 210;
  }
  return 0;
}

float Fp16ToFloat(uint16_t h) { return HalfToFloat(h); }

float E8m0ToFloatHalf(uint8_t e) {
  // 2^(e-128): the subnormal bits 0x00200000 << e below e = 2, else the
  // exponent field e - 1.
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

void DequantizeRow(Type t, const uint8_t* x, int64_t k, float* y) {
  static const internal::Kernel kernel = BestKernel();
  DequantizeWith(kernel, t, x, k, y);
}

void DequantizeRow(Type t, const uint8_t* x, int64_t k, uint16_t* y_bf16) {
  static const internal::Kernel kernel = BestKernel();
  DequantizeWith(kernel, t, x, k, y_bf16);
}

namespace internal {

bool KernelSupported(Kernel kernel) {
  switch (kernel) {
    case Kernel::kPortable:
      return true;
#if defined(__x86_64__)
    case Kernel::kAvx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2");
    case Kernel::kAvx512:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
#endif
    default:
      return false;
  }
}

void DequantizeRowWith(Kernel kernel, Type t, const uint8_t* x, int64_t k, float* y) {
  DequantizeWith(kernel, t, x, k, y);
}

void DequantizeRowWith(Kernel kernel, Type t, const uint8_t* x, int64_t k, uint16_t* y_bf16) {
  DequantizeWith(kernel, t, x, k, y_bf16);
}

}  // namespace internal
}  // namespace engram::ggml
