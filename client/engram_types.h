// Public header of the client library (with client/engram_client.h): the
// value types its API speaks in, declared here so that a worker includes
// no header of common/ (the library converts to and from its own types
// inside its .cc files).
#ifndef ENGRAM_CLIENT_ENGRAM_TYPES_H_
#define ENGRAM_CLIENT_ENGRAM_TYPES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace engram {

// A row id of one Engram layer's table, as the hash writes it (the layer's
// slot offsets included).
using RowId = uint64_t;

// Positions a Sequence holds unless ClientOptions::sequence_capacity says
// otherwise (as the reference allocates).
inline constexpr int64_t kDefaultSequenceCapacity = 65536;

// How a layer's stored rows encode their head_dim values: what Wait writes
// with RowFormat::kRaw. The table manifest's encoding (docs/table-format.md).
enum class StoredEncoding : uint8_t {
  kFp8 = 0,  // "e4m3_e8m0": head_dim e4m3fn codes, then one e8m0 scale per block
  kQ8_0,     // ggml blocks: 34-byte blocks of 32 values
  kQ2_K,     // 84-byte blocks of 256
  kQ3_K,     // 110-byte blocks of 256
  kQ4_K,     // 144-byte blocks of 256
  kQ5_K,     // 176-byte blocks of 256
  kQ6_K,     // 210-byte blocks of 256
  kMxfp4,    // 17-byte blocks of 32
  kBf16,     // plain little-endian values
  kF16,
  kF32,
};

// The manifest's name of `e`: "e4m3_e8m0", "q8_0", "q2_k", "q3_k", "q4_k",
// "q5_k", "q6_k", "mxfp4", "bf16", "f16", "f32".
const char* StoredEncodingName(StoredEncoding e);

// The table's hash layout, as a worker needs it (the manifest's "layout"
// object). Immutable once the client has made it.
struct TableLayout {
  int64_t vocab_size = 0;                 // token ids are 0..vocab_size-1
  std::vector<int64_t> engram_layer_ids;  // the transformer block of each Engram layer
  int max_ngram_size = 0;                 // n-gram orders 2..max_ngram_size
  int n_heads = 0;                        // hash heads per order
  std::vector<int64_t> table_rows;        // rows of each Engram layer's table
  std::string json;                       // the whole layout, in the golden `layout` form
};

}  // namespace engram

#endif  // ENGRAM_CLIENT_ENGRAM_TYPES_H_
