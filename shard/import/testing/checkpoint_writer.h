// Test helper: writes a small DeepSeek-V4.1-shaped safetensors checkpoint
// directory, well-formed or deliberately broken, in the exact shape of the
// official one (shard/import/checkpoint_source.h): config.json with the Engram keys
// under text_config, tokenizer.json (a byte-level BPE vocabulary with added
// special tokens), model.safetensors.index.json, and two shard files
// model-0000{1,2}-of-00002.safetensors, layer A's embed weight/scale pair in
// the first and layer B's in the second, each beside companion Engram
// tensors that are not served (engram.wkv.weight, engram.q_weight,
// engram.k_weight) and an unrelated tensor.
#ifndef ENGRAM_SHARD_IMPORT_TESTING_CHECKPOINT_WRITER_H_
#define ENGRAM_SHARD_IMPORT_TESTING_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/hash/layout.h"

namespace engram::testing {

struct CheckpointFixture {
  std::vector<int64_t> layer_ids = {1, 3};
  int max_ngram_size = 3;
  int n_heads = 2;
  int head_dim = 64;
  int scale_block = 32;
  int64_t engram_vocab_size = 50;  // the prime walk's base
  uint64_t seed = 5;

  // Breakages, for the refusal tests.
  int64_t compressed_vocab_delta = 0;  // added to the true token map count
  int64_t num_embeddings_delta = 0;    // added to layer B's rows in config.json
  bool drop_second_shard = false;      // model-00002-of-00002 not written
  bool wrong_weight_dtype = false;     // layer A's weight as BF16
  bool wrong_scale_shape = false;      // layer B's scale one row short
  bool single_file = false;            // one model.safetensors, no index
};

// Writes the checkpoint into `dir` (created). The rows are FixtureFp8Row.
absl::Status WriteCheckpoint(const std::string& dir, const CheckpointFixture& f);

// The stored row (head_dim e4m3 codes, then head_dim / scale_block e8m0
// scales) of `row` of the fixture's layer index `layer`: finite codes
// (never NaN) and scales 2^-8..2^3, a pure function of its arguments.
std::string FixtureFp8Row(const CheckpointFixture& f, int layer, uint64_t row);

// Rows per layer of the fixture (the sum of its derived primes).
std::vector<uint64_t> FixtureLayerRows(const CheckpointFixture& f);

// The hash layout the checkpoint's files give (derived from its config and
// tokenizer as the import derives it), for fixtures of other file families
// that hold the same model.
absl::StatusOr<HashLayout> FixtureLayout(const CheckpointFixture& f);

}  // namespace engram::testing

#endif  // ENGRAM_SHARD_IMPORT_TESTING_CHECKPOINT_WRITER_H_
