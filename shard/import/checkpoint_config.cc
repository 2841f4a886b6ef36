#include "shard/import/checkpoint_config.h"

#include <algorithm>
#include <array>
#include <climits>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/hash/layout.h"
#include "common/util/json_parse.h"
#include "common/util/status_macros.h"
#include "shard/import/numpy_random.h"

namespace engram {
namespace {

using nlohmann::json;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kMaxCompressedVocab = kInt64Max / 2;  // multiplier bound >= 1
constexpr uint64_t kLayerSeedFactor = 10007;            // default_rng(10007 * layer_id)

// ---------------------------------------------------------------------------
// config.json

// The object holding the Engram keys and the prefix that names them.
struct Keys {
  const json* obj;
  std::string what;    // file
  std::string prefix;  // "" or "text_config."
};

absl::Status Bad(const Keys& k, absl::string_view key, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(k.what, ": ", k.prefix, key, " ", problem));
}

absl::StatusOr<const json*> Find(const Keys& k, const char* key) {
  auto it = k.obj->find(key);
  if (it == k.obj->end()) return Bad(k, key, "is missing");
  return &*it;
}

// An integer JSON value in [lo, hi]; `name` names it in errors.
absl::StatusOr<int64_t> IntIn(const Keys& k, const json& v, absl::string_view name, int64_t lo,
                              int64_t hi) {
  if (!v.is_number_integer()) return Bad(k, name, "must be an integer");
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo) {
      return Bad(k, name, absl::StrCat("is ", u, ", must be in ", lo, "..", hi));
    }
    return static_cast<int64_t>(u);
  }
  const int64_t s = v.get<int64_t>();
  if (s < lo || s > hi) return Bad(k, name, absl::StrCat("is ", s, ", must be in ", lo, "..", hi));
  return s;
}

absl::StatusOr<int64_t> GetInt(const Keys& k, const char* key, int64_t lo, int64_t hi) {
  ASSIGN_OR_RETURN(const json* v, Find(k, key));
  return IntIn(k, *v, key, lo, hi);
}

absl::StatusOr<std::vector<int64_t>> GetInts(const Keys& k, const char* key, int64_t lo,
                                             int64_t hi) {
  ASSIGN_OR_RETURN(const json* v, Find(k, key));
  if (!v->is_array() || v->empty()) return Bad(k, key, "must be a non-empty array of integers");
  std::vector<int64_t> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    ASSIGN_OR_RETURN(int64_t x, IntIn(k, (*v)[i], absl::StrCat(key, "[", i, "]"), lo, hi));
    out.push_back(x);
  }
  return out;
}

// The ranges of EngramConfig, for a config DeriveHashLayout is handed.
absl::Status CheckConfig(const EngramConfig& c) {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (c.layer_ids.empty()) return bad("engram_layer_ids is empty");
  absl::flat_hash_set<int64_t> seen;
  for (int64_t id : c.layer_ids) {
    if (id < 0) return bad("engram_layer_ids holds ", id, ", must be >= 0");
    if (!seen.insert(id).second) return bad("engram_layer_ids lists layer ", id, " twice");
  }
  if (c.num_embeddings.size() != c.layer_ids.size()) {
    return bad("engram_num_embeddings has ", c.num_embeddings.size(), " entries for ",
               c.layer_ids.size(), " layers");
  }
  for (uint64_t rows : c.num_embeddings) {
    if (rows < 1 || rows > kMaxEngramTableRows) {
      return bad("engram_num_embeddings holds ", rows, ", must be in 1..2^48");
    }
  }
  if (c.max_ngram_size < 2 || c.max_ngram_size > kMaxNgramSize) {
    return bad("engram_max_ngram_size must be in 2..", kMaxNgramSize);
  }
  if (c.n_heads < 1 || c.n_heads > kMaxHeads) {
    return bad("engram_n_heads must be in 1..", kMaxHeads);
  }
  if (c.head_dim < 1) return bad("engram_head_dim must be positive");
  if (c.vocab_size < 1) return bad("engram_vocab_size must be positive");
  if (c.compressed_vocab_size < 1 || c.compressed_vocab_size > kMaxCompressedVocab) {
    return bad("engram_compressed_vocab_size must be in 1..", kMaxCompressedVocab);
  }
  if (c.pad_token_id < 0) return bad("engram_pad_token_id must be >= 0");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EngramConfig> ParseEngramConfig(std::string_view config_json_text,
                                               const std::string& what) {
  absl::StatusOr<json> parsed = ParseJson(config_json_text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", parsed.status().message()));
  }
  const json& root = *parsed;
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON object"));
  }
  Keys k{&root, what, ""};
  if (auto it = root.find("text_config"); it != root.end() && !it->is_null()) {
    if (!it->is_object()) return Bad(k, "text_config", "must be an object");
    k = Keys{&*it, what, "text_config."};
  }

  EngramConfig c;
  ASSIGN_OR_RETURN(c.layer_ids, GetInts(k, "engram_layer_ids", 0, kInt64Max));
  absl::flat_hash_set<int64_t> seen;
  for (int64_t id : c.layer_ids) {
    if (!seen.insert(id).second) {
      return Bad(k, "engram_layer_ids", absl::StrCat("lists layer ", id, " twice"));
    }
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> rows, GetInts(k, "engram_num_embeddings", 1,
                                                      static_cast<int64_t>(kMaxEngramTableRows)));
  if (rows.size() != c.layer_ids.size()) {
    return Bad(k, "engram_num_embeddings",
               absl::StrCat("has ", rows.size(), " entries but engram_layer_ids names ",
                            c.layer_ids.size(), " layers"));
  }
  c.num_embeddings.assign(rows.begin(), rows.end());
  ASSIGN_OR_RETURN(const int64_t max_ngram_size,
                   GetInt(k, "engram_max_ngram_size", 2, kMaxNgramSize));
  ASSIGN_OR_RETURN(const int64_t n_heads, GetInt(k, "engram_n_heads", 1, kMaxHeads));
  ASSIGN_OR_RETURN(const int64_t head_dim, GetInt(k, "engram_head_dim", 1, INT_MAX));
  c.max_ngram_size = static_cast<int>(max_ngram_size);
  c.n_heads = static_cast<int>(n_heads);
  c.head_dim = static_cast<int>(head_dim);
  ASSIGN_OR_RETURN(c.vocab_size, GetInt(k, "engram_vocab_size", 1, kInt64Max));
  ASSIGN_OR_RETURN(c.compressed_vocab_size,
                   GetInt(k, "engram_compressed_vocab_size", 1, kMaxCompressedVocab));
  ASSIGN_OR_RETURN(c.pad_token_id, GetInt(k, "engram_pad_token_id", 0, kInt64Max));
  return c;
}

std::vector<int64_t> DeriveMultipliers(int64_t layer_id, int64_t compressed_vocab_size,
                                       int max_ngram_size) {
  const int64_t bound = (kInt64Max / compressed_vocab_size) / 2;
  std::vector<int64_t> m = NumpyIntegers(
      absl::uint128(kLayerSeedFactor) * static_cast<uint64_t>(layer_id), bound, max_ngram_size);
  for (int64_t& v : m) v = v * 2 + 1;  // v < bound <= INT64_MAX / 2
  return m;
}

std::vector<std::vector<std::vector<int64_t>>> DerivePrimes(int n_layers, int n_orders, int n_heads,
                                                            int64_t engram_vocab_size) {
  return WalkPrimes(n_layers, n_orders, n_heads, engram_vocab_size);
}

absl::StatusOr<HashLayout> DeriveHashLayout(const EngramConfig& c, std::vector<int64_t> token_map,
                                            int64_t pad_id) {
  RETURN_IF_ERROR(CheckConfig(c));
  HashLayout layout;
  layout.vocab_size = static_cast<int64_t>(token_map.size());
  layout.engram_layer_ids = c.layer_ids;
  layout.max_ngram_size = c.max_ngram_size;
  layout.n_heads = c.n_heads;
  layout.pad_id = pad_id;
  layout.token_map = std::move(token_map);
  const int n_layers = layout.n_layers();
  const int n_cols = layout.n_cols();

  // Every prime of the walk is >= vocab_size: refuse a sum that cannot
  // match before walking (this also bounds the walk to primes below 2^48).
  for (int l = 0; l < n_layers; ++l) {
    if (static_cast<uint64_t>(c.vocab_size) > c.num_embeddings[l] / n_cols) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", c.layer_ids[l], ": ", n_cols, " primes of at least engram_vocab_size ",
          c.vocab_size, " sum to more than engram_num_embeddings ", c.num_embeddings[l]));
    }
  }
  layout.primes = DerivePrimes(n_layers, layout.n_orders(), c.n_heads, c.vocab_size);
  for (int l = 0; l < n_layers; ++l) {
    // Offsets past 2^48 are never used: the sum saturates there (primes are
    // below 2^63, so nothing overflows) and then cannot match.
    std::vector<int64_t> offsets;
    offsets.reserve(n_cols);
    uint64_t rows = 0;
    for (const std::vector<int64_t>& order : layout.primes[l]) {
      for (int64_t p : order) {
        offsets.push_back(static_cast<int64_t>(rows));
        rows = std::min(rows + static_cast<uint64_t>(p), kMaxEngramTableRows + 1);
      }
    }
    if (rows != c.num_embeddings[l]) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", c.layer_ids[l], ": the derived primes sum to ",
                       rows > kMaxEngramTableRows ? "more than 2^48" : absl::StrCat(rows),
                       " but engram_num_embeddings says ", c.num_embeddings[l]));
    }
    layout.multipliers.push_back(
        DeriveMultipliers(c.layer_ids[l], c.compressed_vocab_size, c.max_ngram_size));
    layout.offsets.push_back(std::move(offsets));
    layout.table_rows.push_back(static_cast<int64_t>(rows));
  }
  RETURN_IF_ERROR(layout.Validate());
  return layout;
}

}  // namespace engram
