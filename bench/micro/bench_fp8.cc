// engram-bench-fp8: fp8 row dequantisation to bf16, values per second on one
// core, for the old scalar loop (kept here as the reference) and for
// fp8::DequantizeRowsBf16 and each of its kernels. The rows are 3072 stored
// rows of head_dim 256, scale_block 32 (264 bytes), quantised from Gaussian
// values, dequantised in one call or one call per row (as the client does).
//
// Decode/<encoding>/<f32|bf16>: DecodeRows (common/codec/row_encoding.h) of every
// row encoding, rows per second on one core (items_per_second), in batches
// of 512 rows of head_dim 256 with realistic block scales.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/codec/fp8.h"
#include "common/codec/row_encoding.h"

namespace {

namespace fp8 = engram::fp8;
using fp8::internal::Bf16Kernel;

constexpr int kRows = 3072;
constexpr int kHeadDim = 256;
constexpr int kScaleBlock = 32;

// The DequantizeRowsBf16 this benchmark was written against: one table
// lookup, f32 multiply and bf16 rounding per value.
void ReferenceDequantizeRowsBf16(const uint8_t* rows, size_t n_rows, int head_dim, int scale_block,
                                 uint16_t* out) {
  const float* lut = fp8::E4m3Table().data();
  const int n_blocks = head_dim / scale_block;
  const size_t row_bytes = static_cast<size_t>(head_dim) + n_blocks;
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* codes = rows + r * row_bytes;
    const uint8_t* scales = codes + head_dim;
    uint16_t* o = out + r * head_dim;
    for (int b = 0; b < n_blocks; ++b) {
      const float s = fp8::E8m0ToFloat(scales[b]);
      const uint8_t* c = codes + b * scale_block;
      uint16_t* ob = o + b * scale_block;
      for (int j = 0; j < scale_block; ++j) {
        ob[j] = fp8::FloatToBf16(lut[c[j]] * s);
      }
    }
  }
}

const std::vector<uint8_t>& Rows() {
  static const std::vector<uint8_t>* rows = [] {
    const int rb = fp8::RowBytes(kHeadDim, kScaleBlock);
    auto* r = new std::vector<uint8_t>(static_cast<size_t>(kRows) * rb);
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> v(kHeadDim);
    for (int i = 0; i < kRows; ++i) {
      for (float& x : v) x = normal(rng);
      fp8::QuantizeRow(v.data(), kHeadDim, kScaleBlock, r->data() + i * rb);
    }
    return r;
  }();
  return *rows;
}

using DequantizeFn = void (*)(const uint8_t*, size_t, int, int, uint16_t*);

template <Bf16Kernel K>
void WithKernel(const uint8_t* rows, size_t n_rows, int head_dim, int scale_block, uint16_t* out) {
  fp8::internal::DequantizeRowsBf16With(K, rows, n_rows, head_dim, scale_block, out);
}

// Runs `fn` over all rows per iteration, in one call (per_row false) or one
// call per row; checks once that it matches the reference.
void Run(benchmark::State& state, DequantizeFn fn, bool per_row, bool supported = true) {
  if (!supported) {
    state.SkipWithError("kernel not supported on this CPU");
    return;
  }
  const std::vector<uint8_t>& rows = Rows();
  const size_t rb = fp8::RowBytes(kHeadDim, kScaleBlock);
  std::vector<uint16_t> out(static_cast<size_t>(kRows) * kHeadDim);
  std::vector<uint16_t> want(out.size());
  ReferenceDequantizeRowsBf16(rows.data(), kRows, kHeadDim, kScaleBlock, want.data());
  fn(rows.data(), kRows, kHeadDim, kScaleBlock, out.data());
  if (out != want) {
    state.SkipWithError("result differs from the reference");
    return;
  }
  for (auto _ : state) {
    if (per_row) {
      for (int r = 0; r < kRows; ++r) {
        fn(rows.data() + r * rb, 1, kHeadDim, kScaleBlock,
           out.data() + static_cast<size_t>(r) * kHeadDim);
      }
    } else {
      fn(rows.data(), kRows, kHeadDim, kScaleBlock, out.data());
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double values = static_cast<double>(kRows) * kHeadDim;
  state.SetItemsProcessed(static_cast<int64_t>(values * state.iterations()));
  state.counters["ns_per_value"] = benchmark::Counter(
      values * state.iterations(), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

bool Supported(Bf16Kernel k) { return fp8::internal::Bf16KernelSupported(k); }

BENCHMARK_CAPTURE(Run, reference, &ReferenceDequantizeRowsBf16, false);
BENCHMARK_CAPTURE(Run, reference_per_row, &ReferenceDequantizeRowsBf16, true);
BENCHMARK_CAPTURE(Run, DequantizeRowsBf16, &fp8::DequantizeRowsBf16, false);
BENCHMARK_CAPTURE(Run, DequantizeRowsBf16_per_row, &fp8::DequantizeRowsBf16, true);
BENCHMARK_CAPTURE(Run, portable, &WithKernel<Bf16Kernel::kPortable>, false);
BENCHMARK_CAPTURE(Run, avx2, &WithKernel<Bf16Kernel::kAvx2>, false, Supported(Bf16Kernel::kAvx2));
BENCHMARK_CAPTURE(Run, avx512, &WithKernel<Bf16Kernel::kAvx512>, false,
                  Supported(Bf16Kernel::kAvx512));

// DecodeRows throughput.

constexpr int kDecodeBatch = 512;

// f16 bits of a random normal value of magnitude in [2^(lo-15), 2^(hi-14)).
uint16_t RandomHalf(std::mt19937& rng, int lo, int hi) {
  const uint32_t exponent = lo + rng() % (hi - lo + 1);
  return static_cast<uint16_t>((rng() & 0x8000u) | (exponent << 10) | (rng() & 0x3FFu));
}

void PutHalf(uint16_t h, uint8_t* p) {
  p[0] = static_cast<uint8_t>(h);
  p[1] = static_cast<uint8_t>(h >> 8);
}

// kDecodeBatch stored rows of `e`: random quants and scales of the size a
// quantised embedding has (no subnormal or non-finite scale).
std::vector<uint8_t> DecodeRowsOf(engram::RowEncoding e) {
  using engram::RowEncoding;
  const int row_bytes = engram::EncodedRowBytes(e, kHeadDim, kScaleBlock).value();
  std::vector<uint8_t> rows(static_cast<size_t>(kDecodeBatch) * row_bytes);
  std::mt19937 rng(11);
  for (uint8_t& b : rows) b = static_cast<uint8_t>(rng());
  const int block_bytes = engram::BlockBytes(e, kScaleBlock);
  for (size_t at = 0; at < rows.size(); at += block_bytes) {
    uint8_t* b = rows.data() + at;
    switch (e) {
      case RowEncoding::kQ8_0:
        PutHalf(RandomHalf(rng, 3, 6), b);  // d, 2^-12 .. 2^-8
        break;
      case RowEncoding::kMxfp4:
        b[0] = static_cast<uint8_t>(118 + rng() % 6);
        break;
      case RowEncoding::kQ2_K:
        PutHalf(RandomHalf(rng, 3, 6) & 0x7FFF, b + 80);
        PutHalf(RandomHalf(rng, 3, 6) & 0x7FFF, b + 82);
        break;
      case RowEncoding::kQ3_K:
        PutHalf(RandomHalf(rng, 3, 6), b + 108);
        break;
      case RowEncoding::kQ4_K:
      case RowEncoding::kQ5_K:
        PutHalf(RandomHalf(rng, 3, 6) & 0x7FFF, b);
        PutHalf(RandomHalf(rng, 3, 6) & 0x7FFF, b + 2);
        break;
      case RowEncoding::kQ6_K:
        PutHalf(RandomHalf(rng, 3, 6), b + 208);
        break;
      case RowEncoding::kF16:
        PutHalf(RandomHalf(rng, 5, 15), b);
        break;
      case RowEncoding::kBf16:
        PutHalf(engram::fp8::FloatToBf16(std::ldexp(static_cast<float>(rng() % 1000), -14)), b);
        break;
      case RowEncoding::kF32: {
        const float v = std::ldexp(static_cast<float>(rng() % 100000) - 50000.0f, -20);
        std::memcpy(b, &v, sizeof v);
        break;
      }
      case RowEncoding::kFp8:
        break;
    }
  }
  if (e == RowEncoding::kFp8) {
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> v(kHeadDim);
    for (int r = 0; r < kDecodeBatch; ++r) {
      for (float& x : v) x = normal(rng);
      fp8::QuantizeRow(v.data(), kHeadDim, kScaleBlock, rows.data() + r * row_bytes);
    }
  }
  return rows;
}

template <typename Out>
void DecodeRowsBench(benchmark::State& state, engram::RowEncoding e) {
  const std::vector<uint8_t> rows = DecodeRowsOf(e);
  std::vector<Out> out(static_cast<size_t>(kDecodeBatch) * kHeadDim);
  for (auto _ : state) {
    engram::DecodeRows(e, rows.data(), kDecodeBatch, kHeadDim, kScaleBlock, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(kDecodeBatch) * state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(rows.size()) * state.iterations());
}

const bool kDecodeRegistered = [] {
  using engram::RowEncoding;
  for (RowEncoding e :
       {RowEncoding::kFp8, RowEncoding::kQ8_0, RowEncoding::kQ2_K, RowEncoding::kQ3_K,
        RowEncoding::kQ4_K, RowEncoding::kQ5_K, RowEncoding::kQ6_K, RowEncoding::kMxfp4,
        RowEncoding::kBf16, RowEncoding::kF16, RowEncoding::kF32}) {
    const std::string name = "Decode/" + std::string(engram::RowEncodingName(e));
    benchmark::RegisterBenchmark((name + "/f32").c_str(), DecodeRowsBench<float>, e);
    benchmark::RegisterBenchmark((name + "/bf16").c_str(), DecodeRowsBench<uint16_t>, e);
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
