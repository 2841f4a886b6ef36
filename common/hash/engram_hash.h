// The Engram n-gram hash: token ids -> row ids of every Engram layer's table.
//
// Bit-exact with the reference rule in docs/table-format.md (and the golden
// vectors): normalise each token through the layout's token map into a
// per-sequence cache, form the 2..N-gram look-backs (pad before the start and
// behind a masked position), multiply in wrapping int64, XOR-roll, then
// floor-mod a prime per (order, head) plus that slot's offset.
#ifndef ENGRAM_COMMON_HASH_ENGRAM_HASH_H_
#define ENGRAM_COMMON_HASH_ENGRAM_HASH_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/hash/fast_mod.h"
#include "common/hash/layout.h"

namespace engram {

using RowId = uint64_t;

// The normalised-id cache of one sequence, kept across calls (a prefill, then
// decode steps whose look-back reaches into it). Not thread-safe: one
// sequence is hashed by one thread at a time.
class SequenceState {
 public:
  static constexpr int64_t kDefaultCapacity = 65536;  // as the reference allocates

  explicit SequenceState(int64_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // Positions currently held (the next decode step starts here).
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  // Forgets the sequence; the next call must start at position 0.
  void Reset() { length_ = 0; }

 private:
  friend class NgramHasher;
  std::vector<int64_t> cache_;  // grows geometrically, never past capacity_
  int64_t length_ = 0;
  int64_t capacity_;
};

// Options for NgramHasher.
struct HasherOptions {
  // How each column's floor-mod is computed. kFast (the default) uses a
  // precomputed reciprocal per prime (common/hash/fast_mod.h); kDivide uses the
  // hardware divide, as the reference does. Both give identical ids;
  // kDivide exists so benchmarks can show the difference.
  enum class Modulo { kFast, kDivide };
  Modulo modulo = Modulo::kFast;
};

// Hashes token ids with one layout. Immutable after Create; Hash/HashBatch
// may be called concurrently from many threads on different SequenceStates.
class NgramHasher {
 public:
  // REQUIRES: nothing; the layout is validated here.
  static absl::StatusOr<std::unique_ptr<NgramHasher>> Create(HashLayout layout,
                                                             HasherOptions options = {});

  const HashLayout& layout() const { return layout_; }
  int n_layers() const { return n_layers_; }
  int n_cols() const { return n_cols_; }
  // Ids written per position: n_layers * n_cols.
  int ids_per_position() const { return n_layers_ * n_cols_; }

  // Hashes positions [start_pos, start_pos + input_ids.size()) of `seq`.
  // start_pos == 0 starts a new generation; otherwise start_pos must be
  // <= seq.length() (a step may rewrite the tail, e.g. after a rejected
  // speculative draft). `mask` is empty (every position is text) or has one
  // entry per id, 0 = masked (image) position. Writes
  // [T][n_layers][n_cols] row ids (each within its layer's table) to out.
  // On error neither `seq` nor `out` is changed.
  absl::Status Hash(SequenceState& seq, int64_t start_pos, std::span<const int64_t> input_ids,
                    std::span<const uint8_t> mask, RowId* out) const;

  // The same for a batch of B sequences that share start_pos: input_ids and
  // mask (nullptr = all text) are [B][T] row-major; out is
  // [B][T][n_layers][n_cols]. Validates the whole batch before touching any
  // state, so a bad batch changes nothing.
  absl::Status HashBatch(std::span<SequenceState* const> seqs, int64_t start_pos, int64_t T,
                         const int64_t* input_ids, const uint8_t* mask, RowId* out) const;

 private:
  struct Column {
    FastModulo modulo;  // by the column's prime
    uint64_t offset;
  };

  NgramHasher(HashLayout layout, HasherOptions options);
  absl::Status Check(const SequenceState& seq, int64_t start_pos,
                     std::span<const int64_t> input_ids, std::span<const uint8_t> mask) const;
  void HashChecked(SequenceState& seq, int64_t start_pos, std::span<const int64_t> input_ids,
                   std::span<const uint8_t> mask, RowId* out) const;
  template <bool kFast>
  void HashPositions(const int64_t* cache, int64_t start_pos, int64_t end_pos, RowId* out) const;

  HashLayout layout_;
  HasherOptions options_;
  int n_layers_;
  int n_orders_;
  int n_heads_;
  int n_cols_;
  std::vector<uint64_t> multipliers_;  // [n_layers][N]
  std::vector<Column> columns_;        // [n_layers][n_cols]
};

}  // namespace engram

#endif  // ENGRAM_COMMON_HASH_ENGRAM_HASH_H_
