// Reads a GGUF dequantisation golden (tests/golden/gguf_dequant.json, the
// format of tests/golden/README.md, section "GGUF block types"): rows of
// each block type as stored and the f32 values ggml's reference gives for
// them. Used by `engramctl dequant-check` and by the tests.
#ifndef ENGRAM_COMMON_GEN_DEQUANT_GOLDEN_H_
#define ENGRAM_COMMON_GEN_DEQUANT_GOLDEN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace engram {

struct DequantGoldenRow {
  std::vector<uint8_t> bytes;
  std::vector<float> f32;  // each value parsed as double, then rounded to float
};

// One entry of "types", as the file gives it.
struct DequantGoldenType {
  std::string name;
  uint32_t ggml_type = 0;
  int64_t block_values = 0, block_bytes = 0, row_bytes = 0;
  std::vector<DequantGoldenRow> rows;
};

// Reads `path` as a GGUF dequantisation golden. An error names the path and
// what is wrong. It checks the file's shape only: that a row's bytes are
// row_bytes long, or the type one we decode, is for the caller to judge.
absl::StatusOr<std::vector<DequantGoldenType>> ReadDequantGolden(const std::string& path);

// The golden's rule: equal as floats, so bit for bit except that it writes
// -0 (ggml's d * 0 for a negative d) as 0.
bool SameAsDequantGolden(float got, float want);

}  // namespace engram

#endif  // ENGRAM_COMMON_GEN_DEQUANT_GOLDEN_H_
