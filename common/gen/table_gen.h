// Synthetic Engram tables: a preset hash layout (DeepSeek-V4.1-Flash geometry
// or a small one) and deterministic pseudo-random fp8 rows, written as a
// normal table directory (see common/format/table.h).
//
// Every stored row is a pure function of (seed, layer index, row), so any
// row can be regenerated alone (GenerateRow) to check a served value.
#ifndef ENGRAM_COMMON_GEN_TABLE_GEN_H_
#define ENGRAM_COMMON_GEN_TABLE_GEN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/codec/row_encoding.h"
#include "common/hash/layout.h"

namespace engram {

// Token space of the presets: 129,280 tokens mapped onto 99,092 normalised
// ids, pad token 2 -> id 2.
inline constexpr int64_t kPresetVocabSize = 129280;
inline constexpr int64_t kPresetNormalizedIds = 99092;
inline constexpr int64_t kPresetPadId = 2;

struct GenTableOptions {
  std::string out_dir;
  // "v41": layers [1, 14], n-gram orders 2..4, 8 heads, head_dim 256,
  //        scale_block 32 (264-byte rows), released multipliers.
  // "small": the same layout rules, head_dim 64, scale_block 32 (66-byte
  //        rows); uses the released v41 multipliers too.
  std::string preset = "v41";
  int64_t engram_vocab_size = 100000;  // base of the prime walk, every order
  int head_dim = 0;                    // 0 = the preset's default
  int scale_block = 0;                 // 0 = the preset's default
  uint64_t seed = 1;
  // Optional: take the layout from this file (golden form, or a manifest /
  // golden case with a "layout" member) instead of building the preset's.
  std::string layout_file;
  // Optional: a JSON array of ints, or {"token_map": [...], "pad_id": N};
  // replaces the layout's token map (vocab_size becomes its length).
  std::string token_map_file;
  // How rows are stored: e4m3_e8m0 (the checkpoint's fp8) by default, or a
  // ggml or plain encoding (rows from GenerateEncodedRow; head_dim must be
  // a multiple of its block, and scale_block is not used).
  RowEncoding encoding = RowEncoding::kFp8;
  std::string table_name = "engram-synthetic";
  uint64_t version = 1;
};

// The preset's head_dim and scale_block after applying the overrides in
// `options`; InvalidArgument for an unknown preset or bad geometry.
absl::Status ResolveGeometry(const GenTableOptions& options, int* head_dim, int* scale_block);

// The layout GenerateTable uses: from options.layout_file if set, else the
// preset's (primes by WalkPrimes, token map a seeded random surjection);
// then options.token_map_file applied. Always validated.
absl::StatusOr<HashLayout> BuildPresetLayout(const GenTableOptions& options);

// Writes the table to options.out_dir (streaming, 16k-row chunks through
// TableWriter). progress(done_rows, total_rows) may be empty.
absl::Status GenerateTable(const GenTableOptions& options,
                           const std::function<void(uint64_t done, uint64_t total)>& progress);

// The bytes of stored row `row` of layer `layer` (an index into the layout's
// layers) exactly as GenerateTable writes them: head_dim e4m3 codes drawn
// from a normal distribution (sigma 112 in code units, so block maxima sit
// near the e4m3 range) then head_dim / scale_block e8m0 scales in 119..123
// (2^-8..2^-4). out must hold head_dim + head_dim / scale_block bytes.
// Thread-safe.
void GenerateRow(uint64_t seed, int layer, uint64_t row, int head_dim, int scale_block,
                 uint8_t* out);

// GenerateRow for rows [first, first + n), written consecutively.
void GenerateRows(uint64_t seed, int layer, uint64_t first, uint64_t n, int head_dim,
                  int scale_block, uint8_t* out);

// The bytes of stored row `row` of layer `layer` in `encoding`
// (EncodedRowBytes(encoding, head_dim, scale_block) of them) exactly as
// GenerateTable writes them: GenerateRow for kFp8; otherwise pseudo-random
// bytes of (seed, layer, row, encoding) whose ggml blocks decode to finite
// values (each block's fp16 d/dmin a small normal number, MXFP4 scales near
// 1; BF16/F16/F32 values small normal numbers). Thread-safe.
// REQUIRES: EncodedRowBytes(encoding, head_dim, scale_block).ok().
void GenerateEncodedRow(RowEncoding encoding, uint64_t seed, int layer, uint64_t row, int head_dim,
                        int scale_block, uint8_t* out);

// A seeded random surjection of vocab_size tokens onto ids 0..n_ids-1 with
// token pad_id -> pad_id. REQUIRES: pad_id < n_ids <= vocab_size.
std::vector<int64_t> RandomTokenMap(uint64_t seed, int64_t vocab_size, int64_t n_ids,
                                    int64_t pad_id);

}  // namespace engram

#endif  // ENGRAM_COMMON_GEN_TABLE_GEN_H_
