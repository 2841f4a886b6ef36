// ggml's row dequantisation for the tensor types a GGUF Engram table may be
// stored in: the block types Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and MXFP4,
// and plain F16, BF16 and F32 values.
//
// The reference is ggml's `dequantize_row_<type>` (ggml/src/ggml-quants.c)
// with ggml's block layouts (ggml/src/ggml-common.h) and scalar conversions
// (ggml/src/ggml-impl.h): every f32 written here has the bits that code
// gives for blocks with finite scales (tests/golden/gguf_dequant.json is the
// spec). Each value is computed with the same float operations in the same
// order; a product of a scale and a quant is exact in f32 wherever a
// subtraction follows it, so a fused multiply-add could not change a result
// either. A NaN or infinite f16 scale can give NaNs; their sign and payload
// are unspecified (in ggml too: the compiler chooses which operand's NaN an
// operation passes on).
//
// All multi-byte fields are little-endian, as GGUF stores them.
//
// Every function here is pure and thread-safe.
#ifndef ENGRAM_COMMON_CODEC_GGML_BLOCKS_H_
#define ENGRAM_COMMON_CODEC_GGML_BLOCKS_H_

#include <cstdint>

namespace engram::ggml {

// ggml's type ids (enum ggml_type, as a GGUF tensor info gives them) of the
// types this file decodes.
enum class Type : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ8_0 = 8,   // 34-byte blocks of 32: f16 d, 32 int8 quants
  kQ2_K = 10,  // 84-byte blocks of 256: 16 4+4-bit scale/min, 2-bit quants, f16 d, dmin
  kQ3_K = 11,  // 110-byte blocks of 256: high-bit mask, 2-bit quants, 16 6-bit scales, f16 d
  kQ4_K = 12,  // 144-byte blocks of 256: f16 d, dmin, 8 6-bit scale/min, 4-bit quants
  kQ5_K = 13,  // 176-byte blocks of 256: as Q4_K plus a high-bit plane
  kQ6_K = 14,  // 210-byte blocks of 256: 4-bit low, 2-bit high quants, 16 int8 scales, f16 d
  kBf16 = 30,
  kMxfp4 = 39,  // 17-byte blocks of 32: e8m0 scale, 32 e2m1 codes
};

// Values one block of `t` holds (32 for Q8_0 and MXFP4, 256 for the
// k-quants, 1 for F32, F16 and BF16) and its bytes (ggml's blck_size and
// type_size).
int BlockValues(Type t);
int BlockBytes(Type t);

// ggml's GGML_FP16_TO_FP32: exact for every finite value and infinity; a NaN
// comes out quiet, with its sign and payload.
float Fp16ToFloat(uint16_t h);

// ggml's GGML_E8M0_TO_FP32_HALF: 2^(e-128), the MXFP4 block scale halved
// because ggml's e2m1 value table holds twice each value (e = 0 and 1 give
// the subnormals 2^-128 and 2^-127; 255 gives 2^127).
float E8m0ToFloatHalf(uint8_t e);

// Dequantises the k values stored as k / BlockValues(t) consecutive blocks
// at `x` into y[0..k): bit for bit ggml's dequantize_row_<t> (F16, BF16:
// the widened values; F32: a copy). The uint16_t overload writes each of
// those f32 values rounded to bf16, nearest-even (fp8::FloatToBf16).
// Uses the widest vector kernel this CPU runs (see internal::Kernel).
// REQUIRES: k >= 0 is a multiple of BlockValues(t); `x` holds
// k / BlockValues(t) * BlockBytes(t) bytes (no alignment needed).
void DequantizeRow(Type t, const uint8_t* x, int64_t k, float* y);
void DequantizeRow(Type t, const uint8_t* x, int64_t k, uint16_t* y_bf16);

namespace internal {

// The kernels DequantizeRow chooses from, exposed so tests and benchmarks
// can run each one; all of them write the same bits. They are one code
// (GCC/Clang vector extensions) compiled for three vector widths.
enum class Kernel {
  kPortable,  // 4 lanes of 32 bits (SSE2 on x86-64)
  kAvx2,      // 8 lanes
  kAvx512,    // 16 lanes (AVX-512F/BW/VL)
};

// True if `kernel` can run on this CPU; kPortable always can.
bool KernelSupported(Kernel kernel);

// DequantizeRow with the given kernel. REQUIRES: KernelSupported(kernel).
void DequantizeRowWith(Kernel kernel, Type t, const uint8_t* x, int64_t k, float* y);
void DequantizeRowWith(Kernel kernel, Type t, const uint8_t* x, int64_t k, uint16_t* y_bf16);

}  // namespace internal
}  // namespace engram::ggml

#endif  // ENGRAM_COMMON_CODEC_GGML_BLOCKS_H_
