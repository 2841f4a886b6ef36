#include "common/hash/layout.h"

#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/hash/layout_json.h"
#include "common/util/file_util.h"
#include "common/util/json_parse.h"
#include "common/util/status_macros.h"

namespace engram {
namespace {

using nlohmann::json;

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("hash layout: ", what));
}

absl::StatusOr<int64_t> GetInt(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return Bad(absl::StrCat("missing member \"", key, "\""));
  if (!it->is_number_integer()) {
    return Bad(absl::StrCat("member \"", key, "\" must be an integer"));
  }
  return it->get<int64_t>();
}

// Reads nested integer arrays of a fixed depth into vectors.
absl::Status ToInts(const json& j, const std::string& name, std::vector<int64_t>* out) {
  if (!j.is_array()) return Bad(absl::StrCat(name, " must be an array"));
  out->clear();
  out->reserve(j.size());
  for (const json& v : j) {
    if (!v.is_number_integer()) {
      return Bad(absl::StrCat(name, " must hold integers only"));
    }
    // Multipliers may be written as unsigned 64-bit values; keep their bits.
    out->push_back(v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>())
                                          : v.get<int64_t>());
  }
  return absl::OkStatus();
}

absl::Status ToInts2(const json& j, const std::string& name,
                     std::vector<std::vector<int64_t>>* out) {
  if (!j.is_array()) return Bad(absl::StrCat(name, " must be an array"));
  out->assign(j.size(), {});
  for (size_t i = 0; i < j.size(); ++i) {
    RETURN_IF_ERROR(ToInts(j[i], absl::StrCat(name, "[", i, "]"), &(*out)[i]));
  }
  return absl::OkStatus();
}

const json* Member(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

bool IsPrime(int64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  if (n % 3 == 0) return n == 3;
  for (int64_t d = 5; d <= n / d; d += 6) {
    if (n % d == 0 || n % (d + 2) == 0) return false;
  }
  return true;
}

}  // namespace

absl::Status HashLayout::Validate() const {
  const int L = n_layers();
  if (vocab_size <= 0) return Bad("vocab_size must be positive");
  if (L <= 0) return Bad("engram_layer_ids must name at least one layer");
  if (max_ngram_size < 2 || max_ngram_size > kMaxNgramSize) {
    return Bad(absl::StrCat("max_ngram_size must be in 2..", kMaxNgramSize));
  }
  if (n_heads < 1 || n_heads > kMaxHeads) {
    return Bad(absl::StrCat("n_heads must be in 1..", kMaxHeads));
  }
  if (pad_id < 0) return Bad("pad_id must be >= 0");
  if (static_cast<int64_t>(token_map.size()) != vocab_size) {
    return Bad(
        absl::StrCat("token_map has ", token_map.size(), " entries, vocab_size is ", vocab_size));
  }
  for (size_t t = 0; t < token_map.size(); ++t) {
    if (token_map[t] < 0 || token_map[t] == dead_id) {
      return Bad(
          absl::StrCat("token_map[", t, "] = ", token_map[t], " is negative or equals dead_id"));
    }
  }
  if (pad_id == dead_id) return Bad("pad_id equals dead_id");
  auto count = [&](size_t got, size_t want, const std::string& what) {
    return got == want ? absl::OkStatus()
                       : Bad(absl::StrCat(what, " has ", got, " entries, expected ", want));
  };
  RETURN_IF_ERROR(count(multipliers.size(), L, "multipliers"));
  RETURN_IF_ERROR(count(primes.size(), L, "primes"));
  RETURN_IF_ERROR(count(offsets.size(), L, "offsets"));
  RETURN_IF_ERROR(count(table_rows.size(), L, "table_rows"));
  for (int l = 0; l < L; ++l) {
    const std::string at = absl::StrCat("[", l, "]");
    RETURN_IF_ERROR(count(multipliers[l].size(), max_ngram_size, "multipliers" + at));
    RETURN_IF_ERROR(count(primes[l].size(), n_orders(), "primes" + at));
    RETURN_IF_ERROR(count(offsets[l].size(), n_cols(), "offsets" + at));
    if (table_rows[l] <= 0) return Bad("table_rows" + at + " must be positive");
    for (int o = 0; o < n_orders(); ++o) {
      RETURN_IF_ERROR(count(primes[l][o].size(), n_heads, absl::StrCat("primes", at, "[", o, "]")));
      for (int h = 0; h < n_heads; ++h) {
        const int64_t p = primes[l][o][h];
        const int64_t off = offsets[l][o * n_heads + h];
        if (p < 1) {
          return Bad(absl::StrCat("primes", at, "[", o, "][", h, "] must be >= 1"));
        }
        if (off < 0 || off > table_rows[l] - p) {
          // off + p may not fit an int64: name the two parts.
          return Bad(absl::StrCat("slot (layer ", l, ", order ", o + 2, ", head ", h,
                                  ") at offset ", off, " with prime ", p,
                                  " falls outside the layer's ", table_rows[l], " rows"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<HashLayout> LayoutFromJsonValue(const json& j) {
  if (!j.is_object()) return Bad("layout must be a JSON object");
  HashLayout out;
  absl::StatusOr<int64_t> v;
  if (!(v = GetInt(j, "vocab_size")).ok()) return v.status();
  out.vocab_size = *v;
  if (!(v = GetInt(j, "max_ngram_size")).ok()) return v.status();
  if (*v < 2 || *v > kMaxNgramSize) {
    return Bad(absl::StrCat("max_ngram_size must be in 2..", kMaxNgramSize));
  }
  out.max_ngram_size = static_cast<int>(*v);
  if (!(v = GetInt(j, "n_heads")).ok()) return v.status();
  if (*v < 1 || *v > kMaxHeads) return Bad(absl::StrCat("n_heads must be in 1..", kMaxHeads));
  out.n_heads = static_cast<int>(*v);
  if (!(v = GetInt(j, "pad_id")).ok()) return v.status();
  out.pad_id = *v;
  if (Member(j, "dead_id") != nullptr) {
    if (!(v = GetInt(j, "dead_id")).ok()) return v.status();
    out.dead_id = *v;
  }
  for (const char* key :
       {"engram_layer_ids", "token_map", "multipliers", "primes", "offsets", "table_rows"}) {
    if (Member(j, key) == nullptr) {
      return Bad(absl::StrCat("missing member \"", key, "\""));
    }
  }
  RETURN_IF_ERROR(ToInts(j["engram_layer_ids"], "engram_layer_ids", &out.engram_layer_ids));
  RETURN_IF_ERROR(ToInts(j["token_map"], "token_map", &out.token_map));
  RETURN_IF_ERROR(ToInts2(j["multipliers"], "multipliers", &out.multipliers));
  RETURN_IF_ERROR(ToInts2(j["offsets"], "offsets", &out.offsets));
  RETURN_IF_ERROR(ToInts(j["table_rows"], "table_rows", &out.table_rows));
  const json& primes = j["primes"];
  if (!primes.is_array()) return Bad("primes must be an array");
  out.primes.assign(primes.size(), {});
  for (size_t l = 0; l < primes.size(); ++l) {
    RETURN_IF_ERROR(ToInts2(primes[l], absl::StrCat("primes[", l, "]"), &out.primes[l]));
  }
  RETURN_IF_ERROR(out.Validate());
  return out;
}

json LayoutToJsonValue(const HashLayout& layout) {
  json j;
  j["vocab_size"] = layout.vocab_size;
  j["engram_layer_ids"] = layout.engram_layer_ids;
  j["max_ngram_size"] = layout.max_ngram_size;
  j["n_heads"] = layout.n_heads;
  j["pad_id"] = layout.pad_id;
  j["dead_id"] = layout.dead_id;
  j["token_map"] = layout.token_map;
  j["multipliers"] = layout.multipliers;
  j["primes"] = layout.primes;
  j["offsets"] = layout.offsets;
  j["table_rows"] = layout.table_rows;
  return j;
}

absl::StatusOr<HashLayout> HashLayout::FromJson(std::string_view json_text) {
  absl::StatusOr<json> j = ParseJson(json_text);
  if (!j.ok()) return Bad(j.status().message());
  return LayoutFromJsonValue(*j);
}

absl::StatusOr<HashLayout> HashLayout::FromFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("cannot read layout file: ", text.status().message()));
  }
  absl::StatusOr<json> parsed = ParseJson(*text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", parsed.status().message()));
  }
  json j = *std::move(parsed);
  if (const json* inner = j.is_object() ? Member(j, "layout") : nullptr) {
    j = *inner;
  }
  absl::StatusOr<HashLayout> out = LayoutFromJsonValue(j);
  if (!out.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", out.status().message()));
  }
  return out;
}

std::string HashLayout::ToJson() const { return LayoutToJsonValue(*this).dump(); }

std::vector<std::vector<std::vector<int64_t>>> WalkPrimes(int n_layers, int n_orders, int n_heads,
                                                          int64_t engram_vocab_size) {
  std::unordered_set<int64_t> seen;
  std::vector<std::vector<std::vector<int64_t>>> out(n_layers,
                                                     std::vector<std::vector<int64_t>>(n_orders));
  for (int l = 0; l < n_layers; ++l) {
    for (int o = 0; o < n_orders; ++o) {
      int64_t start = engram_vocab_size - 1;
      for (int h = 0; h < n_heads; ++h) {
        int64_t p = start + 1;
        while (!IsPrime(p) || seen.count(p) != 0) ++p;
        seen.insert(p);
        out[l][o].push_back(p);
        start = p;
      }
    }
  }
  return out;
}

}  // namespace engram
