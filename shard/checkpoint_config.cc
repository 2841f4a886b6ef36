#include "shard/checkpoint_config.h"

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
#include "common/json_parse.h"
#include "common/status_macros.h"
#include "common/table_gen.h"

namespace engram {
namespace {

using nlohmann::json;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kMaxCompressedVocab = kInt64Max / 2;  // multiplier bound >= 1
constexpr uint64_t kLayerSeedFactor = 10007;            // default_rng(10007 * layer_id)

// ---------------------------------------------------------------------------
// numpy's random stack, as far as Generator.integers(0, high, dtype=int64)
// reaches: SeedSequence -> PCG64 -> random_bounded_uint64_fill (Lemire).

// SeedSequence (numpy/random/bit_generator.pyx): the entropy pool of 4
// 32-bit words and the state words drawn from it.
class SeedSequence {
 public:
  // `entropy`: the seed as 32-bit words, least significant first ([0] for
  // a zero seed), as _coerce_to_uint32_array gives it.
  explicit SeedSequence(const std::vector<uint32_t>& entropy) {
    uint32_t hash_const = kInitA;
    auto hashmix = [&hash_const](uint32_t value) {
      value ^= hash_const;
      hash_const *= kMultA;
      value *= hash_const;
      return value ^ (value >> kXShift);
    };
    auto mix = [](uint32_t x, uint32_t y) {
      const uint32_t r = kMixMultL * x - kMixMultR * y;
      return r ^ (r >> kXShift);
    };
    for (size_t i = 0; i < kPoolSize; ++i) {
      pool_[i] = hashmix(i < entropy.size() ? entropy[i] : 0);
    }
    for (size_t src = 0; src < kPoolSize; ++src) {
      for (size_t dst = 0; dst < kPoolSize; ++dst) {
        if (src != dst) pool_[dst] = mix(pool_[dst], hashmix(pool_[src]));
      }
    }
    for (size_t src = kPoolSize; src < entropy.size(); ++src) {
      for (size_t dst = 0; dst < kPoolSize; ++dst) {
        pool_[dst] = mix(pool_[dst], hashmix(entropy[src]));
      }
    }
  }

  // generate_state(n_words, uint64): 2 * n_words 32-bit words paired
  // little-endian (the first of each pair is the low half).
  std::vector<uint64_t> GenerateState64(size_t n_words) const {
    uint32_t hash_const = kInitB;
    std::vector<uint64_t> out(n_words, 0);
    for (size_t i = 0; i < 2 * n_words; ++i) {
      uint32_t v = pool_[i % kPoolSize];
      v ^= hash_const;
      hash_const *= kMultB;
      v *= hash_const;
      v ^= v >> kXShift;
      out[i / 2] |= static_cast<uint64_t>(v) << (32 * (i % 2));
    }
    return out;
  }

 private:
  static constexpr size_t kPoolSize = 4;
  static constexpr uint32_t kInitA = 0x43b0d7e5;
  static constexpr uint32_t kMultA = 0x931e8875;
  static constexpr uint32_t kInitB = 0x8b51f9dd;
  static constexpr uint32_t kMultB = 0x58f38ded;
  static constexpr uint32_t kMixMultL = 0xca01f9dd;
  static constexpr uint32_t kMixMultR = 0x4973f715;
  static constexpr int kXShift = 16;

  std::array<uint32_t, kPoolSize> pool_;
};

// PCG64 (numpy/random/src/pcg64): a 128-bit LCG with the XSL-RR output,
// and numpy's 32-bit draws that serve both halves of one 64-bit output.
class Pcg64 {
 public:
  explicit Pcg64(const SeedSequence& seq) {
    const std::vector<uint64_t> w = seq.GenerateState64(4);
    const absl::uint128 init_state = absl::MakeUint128(w[0], w[1]);
    const absl::uint128 init_seq = absl::MakeUint128(w[2], w[3]);
    inc_ = (init_seq << 1) | 1;
    state_ = 0;
    Step();
    state_ += init_state;
    Step();
  }

  uint64_t Next64() {
    Step();
    const uint64_t x = absl::Uint128High64(state_) ^ absl::Uint128Low64(state_);
    const unsigned rot = static_cast<unsigned>(absl::Uint128High64(state_) >> 58);
    return (x >> rot) | (x << ((64 - rot) & 63));
  }

  // Low half of a fresh 64-bit output first, then its high half.
  uint32_t Next32() {
    if (has_half_) {
      has_half_ = false;
      return half_;
    }
    const uint64_t x = Next64();
    has_half_ = true;
    half_ = static_cast<uint32_t>(x >> 32);
    return static_cast<uint32_t>(x);
  }

 private:
  void Step() {
    static const absl::uint128 kMultiplier =
        absl::MakeUint128(2549297995355413924ull, 4865540595714422341ull);
    state_ = state_ * kMultiplier + inc_;
  }

  absl::uint128 state_;
  absl::uint128 inc_;
  bool has_half_ = false;
  uint32_t half_ = 0;
};

// Lemire's method for a value in [0, rng] from 32-bit draws.
// REQUIRES: 0 < rng < 0xFFFFFFFF.
uint32_t BoundedLemire32(Pcg64* g, uint32_t rng) {
  const uint32_t excl = rng + 1;
  uint64_t m = static_cast<uint64_t>(g->Next32()) * excl;
  uint32_t leftover = static_cast<uint32_t>(m);
  if (leftover < excl) {
    const uint32_t threshold = (UINT32_MAX - rng) % excl;
    while (leftover < threshold) {
      m = static_cast<uint64_t>(g->Next32()) * excl;
      leftover = static_cast<uint32_t>(m);
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

// Lemire's method for a value in [0, rng] from 64-bit draws.
// REQUIRES: 0 < rng < UINT64_MAX.
uint64_t BoundedLemire64(Pcg64* g, uint64_t rng) {
  const uint64_t excl = rng + 1;
  absl::uint128 m = absl::uint128(g->Next64()) * excl;
  uint64_t leftover = absl::Uint128Low64(m);
  if (leftover < excl) {
    const uint64_t threshold = (UINT64_MAX - rng) % excl;
    while (leftover < threshold) {
      m = absl::uint128(g->Next64()) * excl;
      leftover = absl::Uint128Low64(m);
    }
  }
  return absl::Uint128High64(m);
}

// random_bounded_uint64_fill with use_masked = false: n values in
// [0, rng], the 32-bit draws when rng fits them.
std::vector<uint64_t> BoundedFill(Pcg64* g, uint64_t rng, int n) {
  std::vector<uint64_t> out(n, 0);
  for (uint64_t& v : out) {
    if (rng == 0) {
      v = 0;
    } else if (rng < 0xFFFFFFFFull) {
      v = BoundedLemire32(g, static_cast<uint32_t>(rng));
    } else if (rng == 0xFFFFFFFFull) {
      v = g->Next32();
    } else if (rng < UINT64_MAX) {
      v = BoundedLemire64(g, rng);
    } else {
      v = g->Next64();
    }
  }
  return out;
}

// default_rng(seed).integers(0, high, size=n, dtype=int64), the seed given
// as an unsigned integer of up to 128 bits.
std::vector<int64_t> IntegersFromSeed(absl::uint128 seed, int64_t high, int n) {
  std::vector<uint32_t> entropy;
  do {
    entropy.push_back(static_cast<uint32_t>(absl::Uint128Low64(seed)));
    seed >>= 32;
  } while (seed != 0);
  Pcg64 g{SeedSequence(entropy)};
  const std::vector<uint64_t> drawn = BoundedFill(&g, static_cast<uint64_t>(high) - 1, n);
  return std::vector<int64_t>(drawn.begin(), drawn.end());  // each < high: fits
}

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

std::vector<int64_t> NumpyIntegers(uint64_t seed, int64_t high, int n) {
  return IntegersFromSeed(seed, high, n);
}

std::vector<int64_t> DeriveMultipliers(int64_t layer_id, int64_t compressed_vocab_size,
                                       int max_ngram_size) {
  const int64_t bound = (kInt64Max / compressed_vocab_size) / 2;
  std::vector<int64_t> m = IntegersFromSeed(
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
