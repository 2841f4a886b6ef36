// The Engram hash layout: everything needed to turn token ids into row ids.
//
// A layout is data, loaded from JSON in exactly the `layout` form of the
// golden files (see docs/table-format.md); it is never recomputed from a
// config. The same object serves the client's hasher, the table tools and the
// shard importer.
#ifndef ENGRAM_COMMON_HASH_LAYOUT_H_
#define ENGRAM_COMMON_HASH_LAYOUT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace engram {

// Bounds Validate enforces (the hasher keeps an n-gram's look-back on the
// stack; n_cols() must fit an int).
inline constexpr int kMaxNgramSize = 64;
inline constexpr int kMaxHeads = 4096;

// Immutable once validated; safe to share between threads for reading.
struct HashLayout {
  int64_t vocab_size = 0;                 // token ids are 0..vocab_size-1
  std::vector<int64_t> engram_layer_ids;  // transformer layer of each Engram layer
  int max_ngram_size = 0;                 // orders 2..max_ngram_size
  int n_heads = 0;                        // hash heads per order
  int64_t pad_id = 0;
  int64_t dead_id = -1;                                   // normalised id of a masked position
  std::vector<int64_t> token_map;                         // [vocab_size] token id -> normalised id
  std::vector<std::vector<int64_t>> multipliers;          // [n_layers][N]
  std::vector<std::vector<std::vector<int64_t>>> primes;  // [n_layers][N-1][H]
  std::vector<std::vector<int64_t>> offsets;              // [n_layers][(N-1)*H]
  std::vector<int64_t> table_rows;                        // [n_layers]

  int n_layers() const { return static_cast<int>(engram_layer_ids.size()); }
  int n_orders() const { return max_ngram_size - 1; }
  // Hash columns per layer: (N-1) * H, order-major, head-minor.
  int n_cols() const { return n_orders() * n_heads; }
  // Prime (bucket count) and offset of column `col` of layer `layer`.
  int64_t prime(int layer, int col) const { return primes[layer][col / n_heads][col % n_heads]; }

  // Checks every invariant the hasher relies on: max_ngram_size and n_heads
  // within the bounds above, array shapes, token_map values in range,
  // pad_id >= 0, primes >= 1, each slot [offset, offset+prime) inside
  // [0, table_rows). Returns InvalidArgument naming the first problem.
  absl::Status Validate() const;

  // Parses the JSON text of a layout object (the golden `layout` form,
  // nested at most kMaxJsonDepth deep) and validates it.
  static absl::StatusOr<HashLayout> FromJson(std::string_view json_text);
  // Reads a JSON file that is either a layout object, or an object with a
  // member "layout" (a golden file or a table manifest).
  static absl::StatusOr<HashLayout> FromFile(const std::string& path);
  // Serialises in the golden `layout` form (compact, one line).
  std::string ToJson() const;
};

// The reference prime walk: one set of used primes across all layers and
// orders; each (layer, order) starts from engram_vocab_size - 1 and takes,
// head by head, the smallest prime greater than the current start that is
// not used yet, which becomes the next start. Result [n_layers][n_orders]
// [n_heads].
std::vector<std::vector<std::vector<int64_t>>> WalkPrimes(int n_layers, int n_orders, int n_heads,
                                                          int64_t engram_vocab_size);

}  // namespace engram

#endif  // ENGRAM_COMMON_HASH_LAYOUT_H_
