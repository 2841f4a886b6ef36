// The workload of engram-bench-shard: a synthetic v41 table imported as one
// shard into a reusable work directory, the same rows as one in-RAM array
// (for the bare-TCP ceiling and for checking what a server returned), and a
// stream of decode-step row ids hashed from Zipf-distributed tokens.
#ifndef ENGRAM_BENCH_SHARD_BENCH_SHARD_WORKLOAD_H_
#define ENGRAM_BENCH_SHARD_BENCH_SHARD_WORKLOAD_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/format/shard_map.h"
#include "common/gen/table_gen.h"
#include "common/hash/layout.h"
#include "common/util/huge_buffer.h"

namespace engram::bench {

struct BenchTableOptions {
  // Holds table/ (deleted after the import), shard/, profile_trace.txt and
  // params.txt. Reused as is when params.txt matches these options.
  std::string work_dir = "/tmp/engram-bench-shard";
  // Base of the prime walk; 40000 gives ~0.97M rows per layer, ~510 MB.
  int64_t engram_vocab_size = 40000;
  uint64_t seed = 1;  // of the synthetic rows and the token map
  // Token trace the import profiles into hot_profile.bin (which rows the
  // hot tier pins when it holds only part of the shard): `trace_lines`
  // sequences of `trace_tokens` Zipf tokens, drawn with their own seed so
  // the profile predicts the measured stream without replaying it.
  int trace_lines = 256;
  int trace_tokens = 512;
  uint64_t trace_seed = 99;
};

// A ready shard directory and what describes it.
struct BenchTable {
  std::string shard_dir;
  GenTableOptions gen;  // regenerates the table's layout and rows
  HashLayout layout;
  ShardMap map;
  uint64_t shard_rows = 0;
  uint64_t shard_bytes = 0;  // row bytes of the whole shard
  std::vector<std::string> sst_files;
  bool reused = false;  // the work dir already held it
};

// Builds (or reuses) the work dir's shard. Progress goes to stderr.
absl::StatusOr<BenchTable> PrepareBenchTable(const BenchTableOptions& options);

// Every row of the table in one array, layer after layer, generated with
// GenerateRows (byte-identical to the stored rows). REQUIRES: every layer
// has the same row size. Immutable once built; thread-safe to read.
class RowArray {
 public:
  static absl::StatusOr<RowArray> Build(const BenchTable& table);

  uint32_t row_bytes() const { return row_bytes_; }
  const uint8_t* row(uint32_t layer, uint64_t id) const {
    return data_.data() + (layer_base_[layer] + id) * row_bytes_;
  }
  std::span<const uint64_t> layer_base() const { return layer_base_; }
  const uint8_t* data() const { return data_.data(); }

 private:
  HugePageBuffer data_;               // the same huge pages as the shard's hot tier
  std::vector<uint64_t> layer_base_;  // first row of each layer
  uint32_t row_bytes_ = 0;
};

// Draws token ids with P(rank r) proportional to r^-exponent; ranks map to
// token ids through a fixed shuffle (the same for every seed, so streams of
// different seeds share one vocabulary ranking). Not thread-safe.
class ZipfTokens {
 public:
  ZipfTokens(int64_t vocab_size, double exponent, uint64_t seed);
  int64_t Next();

 private:
  std::vector<double> cdf_;     // cumulative weight of ranks 0..r
  std::vector<int64_t> token_;  // rank -> token id
  std::mt19937_64 rng_;
};

struct DecodeStepOptions {
  int batch = 256;   // sequences, each advanced one token per step
  int prefill = 32;  // tokens hashed per sequence before the first step
  int steps = 2048;  // distinct steps held (the loops cycle through them)
  double zipf_exponent = 1.1;
  uint64_t seed = 7;
};

// The row ids of `steps` decode steps, hashed once up front so the measured
// loops only send them. Step s, layer l is one contiguous run of
// batch * n_cols ids (one LayerRows of a request).
class DecodeSteps {
 public:
  static absl::StatusOr<DecodeSteps> Generate(const HashLayout& layout,
                                              const DecodeStepOptions& options);

  size_t n_steps() const { return n_steps_; }
  int n_layers() const { return n_layers_; }
  size_t ids_per_layer() const { return ids_per_layer_; }
  size_t ids_per_step() const { return ids_per_layer_ * n_layers_; }
  std::span<const uint64_t> Layer(size_t step, int layer) const {
    return {ids_.data() + (step * n_layers_ + layer) * ids_per_layer_, ids_per_layer_};
  }
  // Mean share of a step's ids that are distinct (per layer), sampled over
  // the first steps.
  double distinct_share() const { return distinct_share_; }

 private:
  std::vector<uint64_t> ids_;
  size_t n_steps_ = 0;
  int n_layers_ = 0;
  size_t ids_per_layer_ = 0;
  double distinct_share_ = 0;
};

// OK when `rows` holds exactly the rows of `step` in request order (layers
// in order); otherwise Internal naming the first wrong row.
absl::Status CheckStepRows(const DecodeSteps& steps, size_t step, const RowArray& table,
                           std::span<const uint8_t> rows);

}  // namespace engram::bench

#endif  // ENGRAM_BENCH_SHARD_BENCH_SHARD_WORKLOAD_H_
