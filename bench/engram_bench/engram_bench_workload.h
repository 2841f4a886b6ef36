// The id streams of engram-bench: steps of token ids (decode steps of a
// batch of sequences, or prefill chunks) with the row ids the Engram hash
// (the client's NgramHasher) gives them, hashed once up front so every
// system fetches exactly the same rows, and the measured shape of a stream.
//
// Every system delivers a step's rows in the client library's output order:
// layer after layer, each layer's rows in [B][T][n_cols] order, row_bytes
// each. Peers that fetch over a wire ask for each layer's distinct rows
// (what the client library sends) and scatter them into that order.
#ifndef ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_WORKLOAD_H_
#define ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_WORKLOAD_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/shard/bench_shard_workload.h"
#include "common/hash/engram_hash.h"
#include "inference/inference_loop.h"

namespace engram::bench {

struct StreamSpec {
  // Sequences per step; each adds `tokens` tokens per step.
  int batch = 256;
  // 1 = decode steps: every sequence is prefilled with `prefill` tokens,
  // then each step hashes its next token. More = prefill chunks: every step
  // is the first `tokens` tokens of a new generation (start position 0).
  int tokens = 1;
  int prefill = 32;
  // Distinct steps (the loops cycle through them), at most as many as fit
  // in `max_ids` row ids, at least one.
  int steps = 256;
  uint64_t max_ids = uint64_t{3} << 20;
};

// Immutable once built; thread-safe to read.
class StepStream {
 public:
  // Sequence b of a batch of B reads the trace from its own offset
  // (TokenTrace::Token). InvalidArgument for a bad spec or a token the
  // layout does not know.
  static absl::StatusOr<StepStream> Build(const TokenTrace& trace, const NgramHasher& hasher,
                                          const StreamSpec& spec);

  const StreamSpec& spec() const { return spec_; }
  bool decode() const { return spec_.tokens == 1; }
  // "decode B=256" or "prefill T=2048".
  std::string name() const;
  size_t n_steps() const { return n_steps_; }
  int n_layers() const { return n_layers_; }
  int n_cols() const { return n_cols_; }
  size_t ids_per_layer() const { return ids_per_layer_; }
  size_t ids_per_step() const { return ids_per_layer_ * n_layers_; }

  // Position of every sequence's first token in `step`.
  int64_t start_position(size_t step) const;
  // The step's tokens, [B][T].
  std::span<const int64_t> tokens(size_t step) const;
  // Decode: the prefill's tokens, [B][prefill]; empty for prefill chunks.
  std::span<const int64_t> prefill_tokens() const { return prefill_tokens_; }
  // The step's row ids as the hasher writes them, [B][T][n_layers][n_cols].
  std::span<const RowId> ids(size_t step) const;
  // The distinct rows of `layer` in `step`, in first-seen order.
  std::span<const uint64_t> unique(size_t step, int layer) const;
  // For each id of `layer` in output order ([B][T][n_cols]), its row's
  // index in unique(step, layer).
  std::span<const uint32_t> slots(size_t step, int layer) const;
  // Distinct rows of the step, summed over layers.
  size_t unique_rows(size_t step) const;
  // Mean of unique_rows over the steps.
  double mean_unique_rows() const { return mean_unique_rows_; }

 private:
  StreamSpec spec_;
  size_t n_steps_ = 0;
  int n_layers_ = 0;
  int n_cols_ = 0;
  size_t ids_per_layer_ = 0;
  std::vector<int64_t> tokens_;          // [step][B][T]
  std::vector<int64_t> prefill_tokens_;  // [B][prefill]
  std::vector<RowId> ids_;               // [step][B][T][L][C]
  std::vector<uint32_t> slots_;          // [step][L][B*T*C]
  std::vector<uint64_t> unique_;         // concatenated per (step, layer)
  std::vector<size_t> unique_begin_;     // [step * L + layer], plus the end
  double mean_unique_rows_ = 0;
};

// The measured shape of a stream, read in order (step by step, ids in the
// hasher's order), a row being a (layer, row id) pair.
struct StreamShape {
  double ids_per_step = 0;
  double unique_per_step = 0;  // distinct rows per step, mean
  // Share of lookups that go to the 1% / 10% most looked-up rows of the
  // table (`table_rows` rows in all).
  double top1_share = 0;
  double top10_share = 0;
  // Median number of lookups between two lookups of the same row; -1 when
  // no row repeats.
  double reuse_median = -1;
};
StreamShape MeasureShape(const StepStream& stream, uint64_t table_rows);

// Writes `step`'s rows in output order into `out`: row k of layer l's
// distinct rows is at unique_rows[l] + k * row_bytes. REQUIRES: out holds
// ids_per_step() * row_bytes bytes.
void ScatterRows(const StepStream& stream, size_t step, std::span<const uint8_t* const> unique_rows,
                 uint32_t row_bytes, uint8_t* out);

// OK when `rows` holds exactly `step`'s rows of `table` in output order;
// otherwise Internal naming the first wrong row.
absl::Status CheckRows(const StepStream& stream, size_t step, const RowArray& table,
                       std::span<const uint8_t> rows);

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_ENGRAM_BENCH_ENGRAM_BENCH_WORKLOAD_H_
