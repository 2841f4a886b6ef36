#include "common/gen/table_gen.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "common/format/table.h"
#include "common/hash/layout.h"
#include "common/util/status_macros.h"

namespace engram {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kTokenMapSalt = 0x746F6B656E6D6170ull;  // "tokenmap"
constexpr uint64_t kRowSalt = 0x726F777370726E67ull;       // "rowsprng"

// Released DeepSeek-V4.1-Flash Engram multipliers, layers 1 and 14.
constexpr int64_t kV41Multipliers[2][4] = {
    {76632096046245, 4839876093313, 35959672319349, 73987337458391},
    {67716810739261, 51510806800915, 30921347202721, 82619226485591}};
constexpr int64_t kPresetLayerIds[2] = {1, 14};
constexpr int kPresetMaxNgram = 4;
constexpr int kPresetHeads = 8;

// The splitmix64 finaliser.
inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A small deterministic generator (splitmix64); unlike <random>
// distributions its output is the same on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return Mix64(state_ += kGolden); }
  // Uniform in [0, n), n > 0, without modulo bias.
  uint64_t Uniform(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;
    for (;;) {
      const uint64_t r = Next();
      if (r >= threshold) return r % n;
    }
  }
  template <typename T>
  void Shuffle(std::vector<T>* v) {
    for (size_t i = v->size(); i > 1; --i) {
      std::swap((*v)[i - 1], (*v)[Uniform(i)]);
    }
  }

 private:
  uint64_t state_;
};

// Half-normal quantiles for the row codes. A 15-bit uniform k picks the
// magnitude code m with kMagnitudeCdf[m-1] <= k < kMagnitudeCdf[m], where
// kMagnitudeCdf[m] = ceil(32768 * erf(b_m / (112 * sqrt 2)) - 0.5) and b_m is
// the midpoint between e4m3 magnitudes m and m+1: k -> |N(0, 112)| quantile
// (k + 0.5) / 32768 rounded to e4m3. Baked in so every platform agrees.
constexpr uint16_t kMagnitudeCdf[127] = {
    0,     1,     1,     2,     2,     3,     3,     3,     4,     4,     5,     5,     6,
    6,     7,     7,     8,     9,     10,    10,    11,    12,    13,    14,    16,    17,
    19,    21,    23,    25,    26,    28,    31,    35,    38,    42,    46,    49,    53,
    57,    62,    69,    77,    84,    91,    98,    106,   113,   124,   139,   153,   168,
    182,   197,   212,   226,   248,   277,   306,   336,   365,   394,   423,   452,   496,
    554,   613,   671,   729,   788,   846,   904,   992,   1108,  1225,  1342,  1458,  1575,
    1691,  1808,  1982,  2215,  2448,  2680,  2912,  3144,  3375,  3607,  3953,  4414,  4874,
    5332,  5788,  6242,  6695,  7145,  7817,  8703,  9579,  10444, 11296, 12134, 12958, 13767,
    14950, 16469, 17916, 19287, 20580, 21794, 22927, 23979, 25407, 27042, 28390, 29478, 30338,
    31006, 31512, 31890, 32271, 32550, 32680, 32735, 32756, 32764, 32768};

// u16 -> e4m3 code: bit 15 is the sign, bits 0..14 the magnitude quantile.
const uint8_t* CodeLut() {
  static const uint8_t* lut = [] {
    auto* t = new uint8_t[65536];
    int m = 0;
    for (uint32_t k = 0; k < 32768; ++k) {
      while (k >= kMagnitudeCdf[m]) ++m;
      t[k] = static_cast<uint8_t>(m);
      t[k | 0x8000] = static_cast<uint8_t>(m | 0x80);
    }
    return t;
  }();
  return lut;
}

inline uint64_t RowKey(uint64_t seed_key, int layer, uint64_t row) {
  const uint64_t k = Mix64((seed_key ^ static_cast<uint64_t>(layer)) + kGolden);
  return Mix64((k ^ row) + kGolden);
}

inline void FillRow(const uint8_t* lut, uint64_t key, int head_dim, int n_blocks, uint8_t* out) {
  uint64_t ctr = key;
  const int full = head_dim / 4;
  for (int i = 0; i < full; ++i) {
    const uint64_t w = Mix64(ctr += kGolden);
    out[4 * i + 0] = lut[w & 0xFFFF];
    out[4 * i + 1] = lut[(w >> 16) & 0xFFFF];
    out[4 * i + 2] = lut[(w >> 32) & 0xFFFF];
    out[4 * i + 3] = lut[w >> 48];
  }
  if (const int rest = head_dim - 4 * full; rest > 0) {
    const uint64_t w = Mix64(ctr += kGolden);
    for (int j = 0; j < rest; ++j) out[4 * full + j] = lut[(w >> (16 * j)) & 0xFFFF];
  }
  uint8_t* scales = out + head_dim;
  uint64_t w = 0;
  for (int b = 0; b < n_blocks; ++b) {
    if (b % 8 == 0) w = Mix64(ctr += kGolden);
    const uint32_t byte = (w >> (8 * (b % 8))) & 0xFF;
    scales[b] = static_cast<uint8_t>(119 + ((byte * 5) >> 8));  // 2^-8..2^-4
  }
}

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  }
  return j;
}

// Applies a token map file (array, or {"token_map": [...], "pad_id": N}).
absl::Status ApplyTokenMapFile(const std::string& path, HashLayout* layout) {
  ASSIGN_OR_RETURN(nlohmann::json j, ReadJsonFile(path));
  const nlohmann::json* arr = &j;
  if (j.is_object()) {
    auto it = j.find("token_map");
    if (it == j.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": object without a \"token_map\" member"));
    }
    arr = &*it;
    if (auto p = j.find("pad_id"); p != j.end()) {
      if (!p->is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": pad_id must be an integer"));
      }
      layout->pad_id = p->get<int64_t>();
    }
  }
  if (!arr->is_array() || arr->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": token map must be a non-empty array of ints"));
  }
  std::vector<int64_t> map;
  map.reserve(arr->size());
  for (const nlohmann::json& v : *arr) {
    if (!v.is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": token map must hold integers only"));
    }
    map.push_back(v.get<int64_t>());
  }
  layout->vocab_size = static_cast<int64_t>(map.size());
  layout->token_map = std::move(map);
  return absl::OkStatus();
}

// Pseudo-random rows of the ggml and plain encodings (GenerateEncodedRow).
uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void Store16(uint8_t* out, size_t at, uint16_t v) { std::memcpy(out + at, &v, 2); }

// A positive fp16 normal number in [2^-7, 2^-2): a block scale whose
// products with any quant stay finite.
uint16_t SmallHalf(uint64_t r) {
  return static_cast<uint16_t>(((8 + r % 5) << 10) | (r >> 8) % 1024);
}

// Block bytes and the byte offsets of the fp16 d and dmin (-1: none) of the
// ggml block types, as ggml-common.h lays them out: Q8_0 {d, qs[32]}, Q2_K
// {scales[16], qs[64], d, dmin}, Q3_K {hmask[32], qs[64], scales[12], d},
// Q4_K {d, dmin, scales[12], qs[128]}, Q5_K {d, dmin, scales[12], qh[32],
// qs[128]}, Q6_K {ql[128], qh[64], scales[16], d}, MXFP4 {e8m0 e, qs[16]}.
struct BlockScales {
  RowEncoding encoding;
  int bytes, d, dmin;
};
constexpr BlockScales kBlockScales[] = {
    {RowEncoding::kQ8_0, 34, 0, -1},    {RowEncoding::kQ2_K, 84, 80, 82},
    {RowEncoding::kQ3_K, 110, 108, -1}, {RowEncoding::kQ4_K, 144, 0, 2},
    {RowEncoding::kQ5_K, 176, 0, 2},    {RowEncoding::kQ6_K, 210, 208, -1},
    {RowEncoding::kMxfp4, 17, -1, -1},
};

// Small normal numbers of either sign, as a plain type's bits.
void FillPlain(RowEncoding e, uint64_t* state, uint8_t* out, size_t size) {
  const size_t width = e == RowEncoding::kF32 ? 4 : 2;
  for (size_t at = 0; at < size; at += width) {
    const uint64_t r = SplitMix(state);
    const uint64_t sign = r & 1;
    if (e == RowEncoding::kF32) {
      const uint32_t v =
          static_cast<uint32_t>(sign << 31 | (120 + (r >> 1) % 12) << 23 | (r >> 8) % (1u << 23));
      std::memcpy(out + at, &v, 4);
    } else if (e == RowEncoding::kBf16) {
      Store16(out, at,
              static_cast<uint16_t>(sign << 15 | (120 + (r >> 1) % 12) << 7 | (r >> 8) % 128));
    } else {  // F16
      Store16(out, at,
              static_cast<uint16_t>(sign << 15 | (8 + (r >> 1) % 12) << 10 | (r >> 8) % 1024));
    }
  }
}

}  // namespace

std::vector<int64_t> RandomTokenMap(uint64_t seed, int64_t vocab_size, int64_t n_ids,
                                    int64_t pad_id) {
  Rng rng(Mix64(seed ^ kTokenMapSalt));
  std::vector<int64_t> order(vocab_size), ids(n_ids);
  std::iota(order.begin(), order.end(), 0);
  std::iota(ids.begin(), ids.end(), 0);
  rng.Shuffle(&order);
  rng.Shuffle(&ids);
  std::vector<int64_t> map(vocab_size);
  int64_t holder = -1;  // the token of the bijective part that maps to pad_id
  for (int64_t i = 0; i < n_ids; ++i) {
    map[order[i]] = ids[i];
    if (ids[i] == pad_id) holder = order[i];
  }
  for (int64_t i = n_ids; i < vocab_size; ++i) {
    map[order[i]] = static_cast<int64_t>(rng.Uniform(n_ids));
  }
  std::swap(map[holder], map[pad_id]);  // keeps every id hit
  return map;
}

absl::Status ResolveGeometry(const GenTableOptions& options, int* head_dim, int* scale_block) {
  int hd, sb;
  if (options.preset == "v41") {
    hd = 256, sb = 32;
  } else if (options.preset == "small") {
    hd = 64, sb = 32;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown preset \"", options.preset, "\" (want \"v41\" or \"small\")"));
  }
  if (options.head_dim != 0) hd = options.head_dim;
  if (options.scale_block != 0) sb = options.scale_block;
  if (hd <= 0 || sb <= 0 || hd % sb != 0 || hd > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(
        "head_dim ", hd, " must be a positive multiple of scale_block ", sb, " and at most 65536"));
  }
  *head_dim = hd;
  *scale_block = sb;
  return absl::OkStatus();
}

absl::StatusOr<HashLayout> BuildPresetLayout(const GenTableOptions& options) {
  HashLayout layout;
  if (!options.layout_file.empty()) {
    ASSIGN_OR_RETURN(HashLayout l, HashLayout::FromFile(options.layout_file));
    layout = std::move(l);
  } else {
    if (options.preset != "v41" && options.preset != "small") {
      return absl::InvalidArgumentError(absl::StrCat("unknown preset \"", options.preset, "\""));
    }
    if (options.engram_vocab_size < 1 || options.engram_vocab_size > (int64_t{1} << 40)) {
      return absl::InvalidArgumentError(
          absl::StrCat("engram_vocab_size ", options.engram_vocab_size, " out of range [1, 2^40]"));
    }
    layout.vocab_size = kPresetVocabSize;
    layout.engram_layer_ids.assign(std::begin(kPresetLayerIds), std::end(kPresetLayerIds));
    layout.max_ngram_size = kPresetMaxNgram;
    layout.n_heads = kPresetHeads;
    layout.pad_id = kPresetPadId;
    layout.dead_id = -1;
    layout.token_map =
        RandomTokenMap(options.seed, kPresetVocabSize, kPresetNormalizedIds, kPresetPadId);
    for (const auto& m : kV41Multipliers) {
      layout.multipliers.emplace_back(std::begin(m), std::end(m));
    }
    layout.primes =
        WalkPrimes(layout.n_layers(), layout.n_orders(), layout.n_heads, options.engram_vocab_size);
    for (const auto& layer : layout.primes) {
      std::vector<int64_t> offsets;
      int64_t rows = 0;
      for (const auto& order : layer) {
        for (int64_t p : order) {
          offsets.push_back(rows);
          rows += p;
        }
      }
      layout.offsets.push_back(std::move(offsets));
      layout.table_rows.push_back(rows);
    }
  }
  if (!options.token_map_file.empty()) {
    RETURN_IF_ERROR(ApplyTokenMapFile(options.token_map_file, &layout));
  }
  RETURN_IF_ERROR(layout.Validate());
  return layout;
}

void GenerateRows(uint64_t seed, int layer, uint64_t first, uint64_t n, int head_dim,
                  int scale_block, uint8_t* out) {
  const uint8_t* lut = CodeLut();
  const uint64_t seed_key = Mix64(seed ^ kRowSalt);
  const int n_blocks = head_dim / scale_block;
  const size_t row_bytes = static_cast<size_t>(head_dim) + n_blocks;
  for (uint64_t i = 0; i < n; ++i) {
    FillRow(lut, RowKey(seed_key, layer, first + i), head_dim, n_blocks, out + i * row_bytes);
  }
}

void GenerateRow(uint64_t seed, int layer, uint64_t row, int head_dim, int scale_block,
                 uint8_t* out) {
  GenerateRows(seed, layer, row, 1, head_dim, scale_block, out);
}

void GenerateEncodedRow(RowEncoding encoding, uint64_t seed, int layer, uint64_t row, int head_dim,
                        int scale_block, uint8_t* out) {
  if (encoding == RowEncoding::kFp8) {
    GenerateRow(seed, layer, row, head_dim, scale_block, out);
    return;
  }
  const size_t size = static_cast<size_t>(*EncodedRowBytes(encoding, head_dim, 0));
  uint64_t state = seed;
  for (uint64_t x : {uint64_t{0x46616d696c79ull}, static_cast<uint64_t>(layer), row,
                     static_cast<uint64_t>(encoding)}) {
    state = SplitMix(&state) ^ x;
  }
  if (encoding == RowEncoding::kBf16 || encoding == RowEncoding::kF16 ||
      encoding == RowEncoding::kF32) {
    FillPlain(encoding, &state, out, size);
    return;
  }
  for (size_t at = 0; at < size; at += 8) {
    const uint64_t r = SplitMix(&state);
    std::memcpy(out + at, &r, std::min<size_t>(8, size - at));
  }
  // Each block's fp16 d (and dmin) made a small normal number, MXFP4's e8m0
  // scale 2^-7..2^8.
  for (const BlockScales& bs : kBlockScales) {
    if (bs.encoding != encoding) continue;
    for (size_t b = 0; b < size; b += static_cast<size_t>(bs.bytes)) {
      const uint64_t r = SplitMix(&state);
      if (encoding == RowEncoding::kMxfp4) out[b] = static_cast<uint8_t>(120 + r % 16);
      if (bs.d >= 0) Store16(out, b + static_cast<size_t>(bs.d), SmallHalf(r));
      if (bs.dmin >= 0) Store16(out, b + static_cast<size_t>(bs.dmin), SmallHalf(r >> 20));
    }
  }
}

absl::Status GenerateTable(const GenTableOptions& options,
                           const std::function<void(uint64_t done, uint64_t total)>& progress) {
  if (options.out_dir.empty()) {
    return absl::InvalidArgumentError("GenerateTable: out_dir is empty");
  }
  int head_dim, scale_block;
  RETURN_IF_ERROR(ResolveGeometry(options, &head_dim, &scale_block));
  ASSIGN_OR_RETURN(HashLayout layout, BuildPresetLayout(options));
  const bool fp8 = options.encoding == RowEncoding::kFp8;
  if (!fp8) scale_block = 0;  // the ggml and plain encodings have none
  ASSIGN_OR_RETURN(const int row_bytes, EncodedRowBytes(options.encoding, head_dim, scale_block));
  ASSIGN_OR_RETURN(TableManifest manifest,
                   TableManifest::ForLayout(options.table_name, options.version, std::move(layout),
                                            head_dim, scale_block, options.encoding));
  const uint64_t total = manifest.total_rows();
  ASSIGN_OR_RETURN(std::unique_ptr<TableWriter> writer,
                   TableWriter::Create(options.out_dir, std::move(manifest)));

  constexpr uint64_t kChunkRows = 16384;
  std::vector<uint8_t> buf(kChunkRows * static_cast<size_t>(row_bytes));
  uint64_t done = 0;
  const auto& layers = writer->manifest().layers;
  for (size_t l = 0; l < layers.size(); ++l) {
    for (uint64_t row = 0; row < layers[l].rows; row += kChunkRows) {
      const uint64_t n = std::min(kChunkRows, layers[l].rows - row);
      if (fp8) {
        GenerateRows(options.seed, static_cast<int>(l), row, n, head_dim, scale_block, buf.data());
      } else {
        for (uint64_t i = 0; i < n; ++i) {
          GenerateEncodedRow(options.encoding, options.seed, static_cast<int>(l), row + i, head_dim,
                             0, buf.data() + i * static_cast<size_t>(row_bytes));
        }
      }
      RETURN_IF_ERROR(writer->AppendRows(static_cast<int>(l), buf.data(), n));
      done += n;
      if (progress) progress(done, total);
    }
  }
  return writer->Finish();
}

}  // namespace engram
