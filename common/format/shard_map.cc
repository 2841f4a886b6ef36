#include "common/format/shard_map.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/util/file_util.h"
#include "common/util/json_parse.h"
#include "common/util/status_macros.h"

namespace engram {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("shard map: ", what));
}

// Reads an array of unsigned integers from j[key] into out; each must fit T.
template <typename T>
absl::Status GetUints(const json& j, const char* key, std::vector<T>* out) {
  auto it = j.find(key);
  if (it == j.end()) return Bad(absl::StrCat("missing member \"", key, "\""));
  if (!it->is_array()) return Bad(absl::StrCat("\"", key, "\" must be an array"));
  out->clear();
  for (const json& v : *it) {
    if (!v.is_number_unsigned()) {
      return Bad(absl::StrCat("\"", key, "\" must hold non-negative integers only"));
    }
    const uint64_t x = v.get<uint64_t>();
    if (x > std::numeric_limits<T>::max()) {
      return Bad(absl::StrCat("\"", key, "\"[", out->size(), "] = ", x, " exceeds ",
                              std::numeric_limits<T>::max()));
    }
    out->push_back(static_cast<T>(x));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t ShardMap::RowsOnShard(uint32_t layer, uint32_t shard) const {
  const uint64_t rows = layer_rows[layer];
  if (shard >= rows) return 0;
  return (rows - shard + n_shards - 1) / n_shards;
}

absl::Status ShardMap::Validate() const {
  if (table.empty()) return Bad("table name is empty");
  if (version == 0) return Bad("version must be >= 1 (0 means \"any\")");
  if (n_shards == 0) return Bad("n_shards must be >= 1");
  if (layer_rows.empty()) return Bad("layer_rows is empty");
  if (layer_rows.size() > kMaxShardLayers) {
    return Bad(
        absl::StrCat(layer_rows.size(), " layers; at most ", kMaxShardLayers, " are supported"));
  }
  if (row_bytes.size() != layer_rows.size()) {
    return Bad(absl::StrCat("row_bytes has ", row_bytes.size(), " entries, layer_rows has ",
                            layer_rows.size()));
  }
  for (size_t l = 0; l < layer_rows.size(); ++l) {
    if (layer_rows[l] == 0 || layer_rows[l] > kMaxShardRowId) {
      return Bad(absl::StrCat("layer_rows[", l, "] = ", layer_rows[l], " is outside 1..2^48"));
    }
    if (row_bytes[l] == 0) return Bad(absl::StrCat("row_bytes[", l, "] is 0"));
  }
  if (!replicas.empty() && replicas.size() != n_shards) {
    return Bad(absl::StrCat("replicas lists ", replicas.size(), " shards, n_shards is ", n_shards));
  }
  return absl::OkStatus();
}

std::string ShardMap::ToJson() const {
  json j;
  j["table"] = table;
  j["version"] = version;
  j["n_shards"] = n_shards;
  j["layer_rows"] = layer_rows;
  j["row_bytes"] = row_bytes;
  if (!replicas.empty()) j["replicas"] = replicas;
  return j.dump(2) + "\n";
}

absl::StatusOr<ShardMap> ShardMap::FromJson(std::string_view text) {
  absl::StatusOr<json> parsed = ParseJson(text);
  if (!parsed.ok()) return Bad(std::string(parsed.status().message()));
  json& j = *parsed;
  if (!j.is_object()) return Bad("not a JSON object");
  ShardMap m;
  auto table = j.find("table");
  if (table == j.end() || !table->is_string()) {
    return Bad("\"table\" must be a string");
  }
  m.table = table->get<std::string>();
  for (const char* key : {"version", "n_shards"}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_unsigned()) {
      return Bad(absl::StrCat("\"", key, "\" must be a non-negative integer"));
    }
  }
  m.version = j["version"].get<uint64_t>();
  const uint64_t n = j["n_shards"].get<uint64_t>();
  if (n > UINT32_MAX) return Bad("n_shards is too large");
  m.n_shards = static_cast<uint32_t>(n);
  RETURN_IF_ERROR(GetUints(j, "layer_rows", &m.layer_rows));
  RETURN_IF_ERROR(GetUints(j, "row_bytes", &m.row_bytes));
  if (auto it = j.find("replicas"); it != j.end()) {
    if (!it->is_array()) return Bad("\"replicas\" must be an array of arrays");
    for (const json& shard : *it) {
      if (!shard.is_array()) return Bad("\"replicas\" must be an array of arrays");
      std::vector<std::string>& addrs = m.replicas.emplace_back();
      for (const json& a : shard) {
        if (!a.is_string()) return Bad("replica addresses must be strings");
        addrs.push_back(a.get<std::string>());
      }
    }
  }
  RETURN_IF_ERROR(m.Validate());
  return m;
}

absl::StatusOr<ShardMap> ShardMap::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  absl::StatusOr<ShardMap> m = FromJson(text);
  if (!m.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", m.status().message()));
  }
  return m;
}

absl::Status ShardMap::Save(const std::string& path) const {
  RETURN_IF_ERROR(Validate());
  return WriteFileAtomically(path, ToJson());
}

bool ShardMap::SameData(const ShardMap& other) const {
  return table == other.table && version == other.version && n_shards == other.n_shards &&
         layer_rows == other.layer_rows && row_bytes == other.row_bytes;
}

}  // namespace engram
