// Seeds of the official checkpoint's readers: checkpoint_config_fuzz
// (config.json) and safetensors_index_fuzz (model.safetensors.index.json),
// in the shapes the published DeepSeek-V4.1 files have, plus edge cases.
#include <string>

#include "fuzz/make_corpus.h"

namespace engram::fuzz {

void WriteCheckpointSeeds(const std::string& corpus) {
  const std::string c = "checkpoint_config_fuzz";
  // The released V4.1-Flash keys, nested under text_config as published.
  WriteSeed(corpus, c, "v41-flash.json", R"({
  "architectures": ["DeepseekV41ForCausalLM"],
  "model_type": "deepseek_v41",
  "text_config": {
    "vocab_size": 129280, "hidden_size": 4096,
    "engram_layer_ids": [1, 14],
    "engram_num_embeddings": [384006168, 384016682],
    "engram_max_ngram_size": 4, "engram_n_heads": 8, "engram_head_dim": 256,
    "engram_vocab_size": 16000000, "engram_compressed_vocab_size": 99092,
    "engram_pad_token_id": 2
  }
})");
  WriteSeed(corpus, c, "small-top-level.json",
            R"({"engram_layer_ids": [1, 3], "engram_num_embeddings": [240, 306],
 "engram_max_ngram_size": 3, "engram_n_heads": 2, "engram_head_dim": 64,
 "engram_vocab_size": 50, "engram_compressed_vocab_size": 17, "engram_pad_token_id": 2})");
  WriteSeed(corpus, c, "edge-huge-vocab.json",
            R"({"text_config": {"engram_layer_ids": [0], "engram_num_embeddings": [281474976710656],
 "engram_max_ngram_size": 64, "engram_n_heads": 4096, "engram_head_dim": 2147483647,
 "engram_vocab_size": 9223372036854775807, "engram_compressed_vocab_size": 1,
 "engram_pad_token_id": 0}})");
  WriteSeed(corpus, c, "edge-wrong-types.json",
            R"({"text_config": {"engram_layer_ids": "1,14", "engram_num_embeddings": [-1],
 "engram_max_ngram_size": 4.5, "engram_n_heads": true}})");

  const std::string x = "safetensors_index_fuzz";
  WriteSeed(corpus, x, "two-files.json", R"({
  "metadata": {"total_size": 190000000000},
  "weight_map": {
    "layers.1.engram.embed.weight": "model-00047-of-00048.safetensors",
    "layers.1.engram.embed.scale": "model-00047-of-00048.safetensors",
    "layers.1.engram.wkv.weight": "model-00047-of-00048.safetensors",
    "layers.14.engram.embed.weight": "model-00048-of-00048.safetensors",
    "layers.14.engram.embed.scale": "model-00048-of-00048.safetensors"
  }
})");
  WriteSeed(corpus, x, "edge-escaping-path.json",
            R"({"weight_map": {"layers.1.engram.embed.weight": "../../etc/passwd"}})");
  WriteSeed(corpus, x, "edge-not-a-string.json",
            R"({"weight_map": {"layers.1.engram.embed.weight": 47}})");
  WriteSeed(corpus, x, "edge-no-map.json", R"({"metadata": {}})");
}

}  // namespace engram::fuzz
