// engram-bench-fp8: fp8 row dequantisation to bf16, values per second on one
// core, for the old scalar loop (kept here as the reference) and for
// fp8::DequantizeRowsBf16 and each of its kernels. The rows are 3072 stored
// rows of head_dim 256, scale_block 32 (264 bytes), quantised from Gaussian
// values, dequantised in one call or one call per row (as the client does).
#include <bit>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/fp8.h"

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

}  // namespace

BENCHMARK_MAIN();
