// The Engram tables of an official DeepSeek-V4.1 safetensors checkpoint.
//
// A checkpoint directory holds config.json, tokenizer.json and either
// model.safetensors.index.json (tensor name -> file) with the files it
// names, or one model.safetensors. Per Engram layer L it has
//   layers.L.engram.embed.weight  F8_E4M3  [rows, head_dim]
//   layers.L.engram.embed.scale   F8_E8M0  [rows, head_dim / scale_block]
// beside other Engram tensors (engram.wkv.*, engram.{q,k}_weight) that are
// not served. No file holds the hash layout: it is derived from config.json
// (shard/import/checkpoint_config.h) and tokenizer.json (shard/import/token_map.h).
#ifndef ENGRAM_SHARD_IMPORT_CHECKPOINT_SOURCE_H_
#define ENGRAM_SHARD_IMPORT_CHECKPOINT_SOURCE_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "shard/import/row_source.h"

namespace engram {

inline constexpr char kCheckpointConfigFile[] = "config.json";
inline constexpr char kCheckpointIndexFile[] = "model.safetensors.index.json";
inline constexpr char kCheckpointSingleFile[] = "model.safetensors";
inline constexpr char kCheckpointTokenizerFile[] = "tokenizer.json";

// Opens checkpoint directory `dir` as a RowSource of kind "checkpoint": the
// layout derived from config.json and tokenizer.json (the token map's
// count must equal engram_compressed_vocab_size, the primes must sum to
// engram_num_embeddings), each layer's weight and scale tensors checked
// (dtype, shape, extent) in whichever file holds them. The table is named
// after the directory; `version` 0 = 1. Only the headers and the Engram
// tables are ever read.
absl::StatusOr<std::unique_ptr<RowSource>> OpenCheckpointSource(const std::string& dir,
                                                                uint64_t version);

}  // namespace engram

#endif  // ENGRAM_SHARD_IMPORT_CHECKPOINT_SOURCE_H_
