// fp8 codecs for Engram table rows: e4m3fn values with e8m0 block scales.
//
// e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities,
// 0x7F/0xFF are NaN, the largest finite magnitude is 448 (0x7E).
// e8m0: an unsigned exponent `e` meaning 2^(e - 127); 255 is NaN.
//
// A stored row is `head_dim` e4m3 codes followed by `head_dim / scale_block`
// e8m0 codes; value j of the row is e4m3(code[j]) *
// 2^(scale[j/scale_block]-127).
//
// Every function here is pure and thread-safe.
#ifndef ENGRAM_COMMON_CODEC_FP8_H_
#define ENGRAM_COMMON_CODEC_FP8_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace engram::fp8 {

inline constexpr uint8_t kE4m3MaxCode = 0x7E;  // +448
inline constexpr uint8_t kE4m3NaN = 0x7F;
inline constexpr float kE4m3Max = 448.0f;
inline constexpr uint8_t kE8m0NaN = 0xFF;

// Bytes of one stored row. REQUIRES: scale_block > 0, head_dim % scale_block ==
// 0.
inline constexpr int RowBytes(int head_dim, int scale_block) {
  return head_dim + head_dim / scale_block;
}

// The 256-entry decode table: E4m3Table()[code] == E4m3ToFloat(code).
const std::array<float, 256>& E4m3Table();

// Decodes one e4m3fn code. NaN codes decode to the quiet NaN 0x7FC00000;
// 0x80 (negative zero) decodes to +0.0, as fp8_codec.json requires.
float E4m3ToFloat(uint8_t code);

// Encodes with round-to-nearest, ties to the even code. NaN -> 0x7F;
// |x| >= 448 and infinities saturate to 0x7E / 0xFE; the sign of zero (and of
// values that round to zero) is kept; subnormal codes are produced exactly.
uint8_t FloatToE4m3(float x);

// Decodes an e8m0 exponent: 2^(e-127). e = 0 gives 2^-127 (a subnormal
// float); e = 255 gives NaN.
float E8m0ToFloat(uint8_t e);

// Encodes a positive finite float as the nearest power of two (linear
// distance; an exact tie 1.5 * 2^k goes to the even exponent k), clamped to
// codes 0..254. Outside the domain: x <= 0 -> 0, +inf -> 254, NaN -> 255.
uint8_t FloatToE8m0(float x);

// Rounds an f32 to bf16 bits, round-to-nearest-even; NaN stays a quiet NaN
// with its sign.
uint16_t FloatToBf16(float x);

// FloatToBf16 on bits: `bf16` = the bf16 bits of the f32 whose bits are
// `f32` (in the low 16 bits). U is uint32_t or a GCC/Clang vector of
// uint32_t, rounded lane by lane, so that vectorised decoders round as
// FloatToBf16 does. Vectors are passed by reference: by value, one wider than
// the caller's ISA would change the ABI.
template <typename U>
[[gnu::always_inline]] constexpr void RoundToBf16Bits(const U& f32, U* bf16) {
  const U rounded = (f32 + 0x7FFFu + ((f32 >> 16) & 1u)) >> 16;
  const U quiet_nan = (f32 >> 16) | 0x40u;
  *bf16 = (f32 & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded;
}

// Dequantises `n_rows` consecutive stored rows (each RowBytes(head_dim,
// scale_block) bytes) into out[n_rows * head_dim] floats.
// REQUIRES: scale_block > 0 and head_dim % scale_block == 0.
void DequantizeRows(const uint8_t* rows, size_t n_rows, int head_dim, int scale_block, float* out);

// Same as DequantizeRows, writing bf16 bits (round-to-nearest-even from the
// f32 product) into out[n_rows * head_dim]: bit for bit
// FloatToBf16(E4m3ToFloat(code) * E8m0ToFloat(scale)) for every value. Uses
// the widest SIMD kernel this CPU runs (see internal::Bf16Kernel).
void DequantizeRowsBf16(const uint8_t* rows, size_t n_rows, int head_dim, int scale_block,
                        uint16_t* out);
// Overload of DequantizeRowsBf16: a uint16_t output buffer means bf16.
inline void DequantizeRows(const uint8_t* rows, size_t n_rows, int head_dim, int scale_block,
                           uint16_t* out) {
  DequantizeRowsBf16(rows, n_rows, head_dim, scale_block, out);
}

// Quantises values[head_dim] into one stored row out_row[RowBytes()]. Per
// block of scale_block values the scale is the smallest power of two 2^k
// (k clamped to -127..127) with amax / 2^k <= 448, and code j is
// FloatToE4m3(v[j] / 2^k). An all-zero block gets scale 2^0 (code 127); a
// block holding inf/NaN gets scale code 254.
// REQUIRES: scale_block > 0 and head_dim % scale_block == 0.
void QuantizeRow(const float* values, int head_dim, int scale_block, uint8_t* out_row);

namespace internal {

// The kernels DequantizeRowsBf16 chooses from, exposed so tests and
// benchmarks can run each one; all of them produce the same bits.
enum class Bf16Kernel {
  kPortable,  // GCC/Clang vector extensions, 8 lanes (SSE2 on x86-64)
  kAvx2,      // the same code, 16 lanes
  kAvx512,    // AVX-512BW table lookups, 32 lanes
};

// True if `kernel` can run on this CPU; kPortable always can.
bool Bf16KernelSupported(Bf16Kernel kernel);

// DequantizeRowsBf16 with the given kernel.
// REQUIRES: Bf16KernelSupported(kernel).
void DequantizeRowsBf16With(Bf16Kernel kernel, const uint8_t* rows, size_t n_rows, int head_dim,
                            int scale_block, uint16_t* out);

}  // namespace internal
}  // namespace engram::fp8

#endif  // ENGRAM_COMMON_CODEC_FP8_H_
