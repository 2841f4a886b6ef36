// The Engram hash layout of a DeepSeek checkpoint, derived from its
// config.json.
//
// The released safetensors checkpoint stores the embedding rows but no hash
// constants: every consumer derives them from the config's `engram_*` keys
// by the reference rules, which this file reproduces bit for bit:
//
//   multipliers: for each Engram layer, numpy's
//     default_rng(10007 * layer_id).integers(0, bound, size=max_ngram_size,
//                                            dtype=int64) * 2 + 1
//     with bound = (INT64_MAX // compressed_vocab_size) // 2;
//   primes: one walk over all layers and n-gram orders 2..N, each (layer,
//     order) restarting above engram_vocab_size - 1 and taking, head by
//     head, the smallest prime not used yet (common/hash/layout.h WalkPrimes);
//   offsets: per layer, the exclusive running sum of its primes in (order,
//     head) order; a layer's rows are the sum of its primes and must equal
//     its configured engram_num_embeddings.
//
// For DeepSeek-V4.1 (layers 1 and 14, N = 4, 8 heads, vocab 16,000,000,
// compressed vocab 99,092) that is the 48 consecutive primes 16,000,057 ..
// 16,000,889 and tables of 384,006,168 and 384,016,682 rows.
//
// Everything here is a pure function of its arguments and thread-safe.
#ifndef ENGRAM_SHARD_IMPORT_CHECKPOINT_CONFIG_H_
#define ENGRAM_SHARD_IMPORT_CHECKPOINT_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/hash/layout.h"

namespace engram {

// A layer's table may have at most this many rows (engram_num_embeddings).
inline constexpr uint64_t kMaxEngramTableRows = uint64_t{1} << 48;

// The Engram keys of a checkpoint's config.json. As returned by
// ParseEngramConfig: layer_ids non-empty, each >= 0 and distinct;
// num_embeddings one per layer, each in 1..kMaxEngramTableRows;
// max_ngram_size in 2..kMaxNgramSize; n_heads in 1..kMaxHeads; head_dim,
// vocab_size and compressed_vocab_size > 0, compressed_vocab_size at most
// INT64_MAX / 2 (so the multiplier bound is >= 1); pad_token_id >= 0.
struct EngramConfig {
  std::vector<int64_t> layer_ids;        // engram_layer_ids: transformer layers
  std::vector<uint64_t> num_embeddings;  // engram_num_embeddings: rows per layer
  int max_ngram_size = 0;                // engram_max_ngram_size: orders 2..N
  int n_heads = 0;                       // engram_n_heads: hash heads per order
  int head_dim = 0;                      // engram_head_dim: values per row
  int64_t vocab_size = 0;                // engram_vocab_size: base of the prime walk
  int64_t compressed_vocab_size = 0;     // engram_compressed_vocab_size
  int64_t pad_token_id = 0;              // engram_pad_token_id
};

// Reads the Engram keys from the text of a config.json: from its
// `text_config` object when it has one, else from the top level. Every key
// above is required, with an integer (array) value in the documented range.
// Returns InvalidArgument of one line "<what>: <key> ..." naming the first
// problem (`what` is normally the file's path).
absl::StatusOr<EngramConfig> ParseEngramConfig(std::string_view config_json_text,
                                               const std::string& what);

// The max_ngram_size hash multipliers of Engram layer `layer_id`, exactly
// as numpy computes them (see the top of this file).
// REQUIRES: layer_id >= 0, 1 <= compressed_vocab_size <= INT64_MAX / 2,
// max_ngram_size >= 0.
std::vector<int64_t> DeriveMultipliers(int64_t layer_id, int64_t compressed_vocab_size,
                                       int max_ngram_size);

// The reference prime walk (WalkPrimes of common/hash/layout.h, which table
// generation uses too): [n_layers][n_orders][n_heads] distinct primes, each
// (layer, order) starting above engram_vocab_size - 1.
// REQUIRES: n_layers, n_orders, n_heads >= 0; 1 <= engram_vocab_size <= 2^62.
// Costs a trial division per candidate: meant for vocabularies up to ~2^48.
std::vector<std::vector<std::vector<int64_t>>> DerivePrimes(int n_layers, int n_orders, int n_heads,
                                                            int64_t engram_vocab_size);

// The hash layout of config `c` over `token_map` (token id -> normalised
// id; the layout's vocab_size is its size) with normalised pad id `pad_id`
// and the default dead_id: multipliers, primes, offsets and table_rows as
// derived above. InvalidArgument (one line) when `c` breaks the ranges of
// EngramConfig, when a layer's primes do not sum to its num_embeddings
// ("layer 14: the derived primes sum to X but engram_num_embeddings says
// Y"), or when the result fails HashLayout::Validate.
absl::StatusOr<HashLayout> DeriveHashLayout(const EngramConfig& c, std::vector<int64_t> token_map,
                                            int64_t pad_id);

}  // namespace engram

#endif  // ENGRAM_SHARD_IMPORT_CHECKPOINT_CONFIG_H_
