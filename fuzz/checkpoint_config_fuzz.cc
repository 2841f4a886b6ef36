// Fuzz target: a checkpoint's config.json (ParseEngramConfig,
// shard/import/checkpoint_config.h), the only source of an official checkpoint's
// Engram geometry. Refusals are InvalidArgument; an accepted config is in
// the ranges EngramConfig promises, and its multipliers derive (odd, one
// per look-back).
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "shard/import/checkpoint_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engram;
  const absl::StatusOr<EngramConfig> c = ParseEngramConfig(fuzz::AsText(data, size), "config");
  if (!c.ok()) {
    FUZZ_CHECK(c.status().code() == absl::StatusCode::kInvalidArgument, c.status().ToString());
    return 0;
  }
  FUZZ_CHECK(!c->layer_ids.empty(), "no layers");
  FUZZ_CHECK(c->num_embeddings.size() == c->layer_ids.size(), "rows per layer");
  FUZZ_CHECK(c->max_ngram_size >= 2 && c->n_heads >= 1 && c->head_dim > 0, "geometry");
  FUZZ_CHECK(c->compressed_vocab_size > 0 && c->vocab_size > 0 && c->pad_token_id >= 0, "vocab");
  for (const int64_t id : c->layer_ids) {
    const auto m = DeriveMultipliers(id, c->compressed_vocab_size, c->max_ngram_size);
    FUZZ_CHECK(static_cast<int>(m.size()) == c->max_ngram_size, "one multiplier per look-back");
    for (const int64_t x : m) FUZZ_CHECK((x & 1) == 1, "multipliers are odd");
  }
  return 0;
}
