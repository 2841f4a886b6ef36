#include "shard/shard_format.h"

#include <xxhash.h>

#include <cctype>
#include <climits>
#include <cstring>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/util/file_util.h"
#include "common/util/json_parse.h"
#include "common/util/status_macros.h"
#include "rocksdb/cache.h"
#include "rocksdb/memtablerep.h"
#include "rocksdb/statistics.h"
#include "rocksdb/table.h"

namespace engram {
namespace {

// layer_pin_percent may sum to 100 plus this share of it (rounding).
constexpr double kTierPlanSlack = 1e-9;

using nlohmann::json;

bool WellFormedChecksum(const std::string& c) {
  constexpr std::string_view kPrefix = "xxh3_64:";
  if (c.size() != kPrefix.size() + 16 || c.compare(0, kPrefix.size(), kPrefix) != 0) {
    return false;
  }
  for (size_t i = kPrefix.size(); i < c.size(); ++i) {
    if (!std::isxdigit(static_cast<unsigned char>(c[i])) || std::isupper(c[i])) {
      return false;
    }
  }
  return true;
}

absl::Status Mismatch(const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat("shard.json: ", what));
}

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("shard.json: ", what));
}

// Reads j[key] as T if it has the JSON kind `is`.
template <typename T>
absl::Status Get(const json& j, const char* key, bool (json::*is)() const, T* out) {
  auto it = j.find(key);
  if (it == j.end() || !((*it).*is)()) {
    return Bad(absl::StrCat("member \"", key, "\" is missing or has the wrong type"));
  }
  *out = it->get<T>();
  return absl::OkStatus();
}

}  // namespace

const char* TailFormatName(TailFormat format) {
  return format == TailFormat::kCuckoo ? "cuckoo" : "block";
}

absl::StatusOr<TailFormat> ParseTailFormat(std::string_view name) {
  if (name == "block") return TailFormat::kBlock;
  if (name == "cuckoo") return TailFormat::kCuckoo;
  return absl::InvalidArgumentError(
      absl::StrCat("tail format '", std::string(name),
                   "' is neither 'block' (block-based tables: pread, mmap "
                   "or O_DIRECT) nor 'cuckoo' (CuckooTables read through mmap)"));
}

uint32_t RowChecksum(uint64_t key, const uint8_t* row, size_t n) {
  return static_cast<uint32_t>(XXH3_64bits_withSeed(row, n, key));
}

void EncodeCuckooValue(uint64_t key, const uint8_t* row, size_t n, std::string* value) {
  value->resize(n + kRowChecksumBytes);
  std::memcpy(value->data(), row, n);
  const uint32_t sum = RowChecksum(key, row, n);
  for (size_t i = 0; i < kRowChecksumBytes; ++i)
    (*value)[n + i] = static_cast<char>(sum >> (8 * i));
}

bool CuckooValueIntact(uint64_t key, const char* value, size_t n) {
  uint32_t stored = 0;
  for (size_t i = 0; i < kRowChecksumBytes; ++i) {
    stored |= uint32_t{static_cast<uint8_t>(value[n + i])} << (8 * i);
  }
  return stored == RowChecksum(key, reinterpret_cast<const uint8_t*>(value), n);
}

absl::Status ShardInfo::Validate(const ShardMap& map) const {
  if (shard_index >= map.n_shards) {
    return Mismatch(absl::StrCat("shard_index ", shard_index,
                                 " is not below the shard map's n_shards ", map.n_shards));
  }
  if (layers.size() != map.layer_rows.size()) {
    return Mismatch(
        absl::StrCat("lists ", layers.size(), " layers, the shard map ", map.layer_rows.size()));
  }
  for (size_t l = 0; l < layers.size(); ++l) {
    const uint64_t want = map.RowsOnShard(static_cast<uint32_t>(l), shard_index);
    if (layers[l].rows_owned != want) {
      return Mismatch(absl::StrCat("layer ", l, " holds ", layers[l].rows_owned,
                                   " rows, the shard map gives shard ", shard_index, " ", want));
    }
    if (!WellFormedChecksum(layers[l].checksum)) {
      return Mismatch(
          absl::StrCat("layer ", l, " checksum '", layers[l].checksum, "' is malformed"));
    }
  }
  if (!WellFormedChecksum(source_checksum)) {
    return Mismatch(absl::StrCat("source_checksum '", source_checksum, "' is malformed"));
  }
  return absl::OkStatus();
}

bool ShardInfo::SameImport(const ShardInfo& other) const {
  if (shard_index != other.shard_index || source_checksum != other.source_checksum ||
      source_kind != other.source_kind || profile_checksum != other.profile_checksum ||
      tail_format != other.tail_format || layers.size() != other.layers.size()) {
    return false;
  }
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].rows_owned != other.layers[l].rows_owned ||
        layers[l].checksum != other.layers[l].checksum ||
        layers[l].encoding != other.layers[l].encoding) {
      return false;
    }
  }
  return true;
}

std::string ShardInfo::ToJson() const {
  json j;
  j["format"] = kShardFormat;
  j["format_version"] = kShardFormatVersion;
  j["shard_index"] = shard_index;
  json& ls = j["layers"] = json::array();
  for (const Layer& l : layers) {
    ls.push_back({{"layer_id", l.layer_id},
                  {"rows_owned", l.rows_owned},
                  {"checksum", l.checksum},
                  {"encoding", RowEncodingName(l.encoding)}});
  }
  j["source_checksum"] = source_checksum;
  j["import"] = {{"source_kind", source_kind},
                 {"source_path", source_path},
                 {"profile_checksum", profile_checksum},
                 {"tail_format", TailFormatName(tail_format)}};
  return j.dump(2) + "\n";
}

absl::StatusOr<ShardInfo> ShardInfo::FromJson(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad("not a JSON object");
  std::string format;
  int64_t format_version = 0;
  RETURN_IF_ERROR(Get(j, "format", &json::is_string, &format));
  RETURN_IF_ERROR(Get(j, "format_version", &json::is_number_integer, &format_version));
  if (format != kShardFormat || format_version != kShardFormatVersion) {
    return Bad(absl::StrCat("format ", format, " v", format_version, " is not ", kShardFormat, " v",
                            kShardFormatVersion));
  }
  ShardInfo info;
  RETURN_IF_ERROR(Get(j, "shard_index", &json::is_number_unsigned, &info.shard_index));
  RETURN_IF_ERROR(Get(j, "source_checksum", &json::is_string, &info.source_checksum));
  auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_array()) return Bad("\"layers\" must be an array");
  for (const json& l : *layers) {
    if (!l.is_object()) return Bad("\"layers\" must hold objects");
    Layer& out = info.layers.emplace_back();
    RETURN_IF_ERROR(Get(l, "layer_id", &json::is_number_integer, &out.layer_id));
    RETURN_IF_ERROR(Get(l, "rows_owned", &json::is_number_unsigned, &out.rows_owned));
    RETURN_IF_ERROR(Get(l, "checksum", &json::is_string, &out.checksum));
    if (l.contains("encoding")) {
      std::string name;
      RETURN_IF_ERROR(Get(l, "encoding", &json::is_string, &name));
      absl::StatusOr<RowEncoding> e = ParseRowEncoding(name);
      if (!e.ok()) return Bad(std::string(e.status().message()));
      out.encoding = *e;
    }
  }
  auto imp = j.find("import");
  if (imp == j.end() || !imp->is_object()) return Bad("\"import\" must be an object");
  RETURN_IF_ERROR(Get(*imp, "source_kind", &json::is_string, &info.source_kind));
  RETURN_IF_ERROR(Get(*imp, "source_path", &json::is_string, &info.source_path));
  RETURN_IF_ERROR(Get(*imp, "profile_checksum", &json::is_string, &info.profile_checksum));
  if (imp->contains("tail_format")) {
    std::string name;
    RETURN_IF_ERROR(Get(*imp, "tail_format", &json::is_string, &name));
    absl::StatusOr<TailFormat> tail = ParseTailFormat(name);
    if (!tail.ok()) return Bad(std::string(tail.status().message()));
    info.tail_format = *tail;
  }
  return info;
}

absl::StatusOr<ShardInfo> ShardInfo::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  absl::StatusOr<ShardInfo> info = FromJson(text);
  if (!info.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", info.status().message()));
  }
  return info;
}

absl::Status ShardInfo::Save(const std::string& path) const {
  return WriteFileAtomically(path, ToJson());
}

std::vector<double> TierPlanFile::layer_pin_shares() const {
  std::vector<double> shares;
  if (policy != Policy::kWindow) return shares;
  for (double p : layer_pin_percent) shares.push_back(p / 100);
  return shares;
}

std::string TierPlanFile::ToJson() const {
  json j;
  j["policy"] = policy == Policy::kWindow ? "window" : "frequency";
  if (cache_share_percent.has_value()) j["cache_share_percent"] = *cache_share_percent;
  if (policy == Policy::kWindow) j["layer_pin_percent"] = layer_pin_percent;
  if (ram_budget_bytes > 0) j["ram_budget_bytes"] = ram_budget_bytes;
  if (predicted_exposed_wait_percent.has_value()) {
    j["predicted_exposed_wait_percent"] = *predicted_exposed_wait_percent;
  }
  return j.dump(2) + "\n";
}

absl::StatusOr<TierPlanFile> TierPlanFile::FromJson(std::string_view text) {
  absl::StatusOr<json> parsed = ParseJson(text);
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (!j.is_object()) return bad("not a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key != "policy" && key != "cache_share_percent" && key != "layer_pin_percent" &&
        key != "ram_budget_bytes" && key != "predicted_exposed_wait_percent") {
      return bad(absl::StrCat(
          "unknown member \"", key,
          "\" (known: policy, cache_share_percent, layer_pin_percent, ram_budget_bytes, "
          "predicted_exposed_wait_percent)"));
    }
  }
  TierPlanFile f;
  auto policy = j.find("policy");
  if (policy == j.end() || !policy->is_string() ||
      (*policy != "window" && *policy != "frequency")) {
    return bad("\"policy\" must be \"window\" or \"frequency\"");
  }
  f.policy = *policy == "window" ? Policy::kWindow : Policy::kFrequency;
  if (auto c = j.find("cache_share_percent"); c != j.end()) {
    if (!c->is_number_unsigned() || c->get<uint64_t>() > 100) {
      return bad("\"cache_share_percent\" must be a whole number 0..100");
    }
    f.cache_share_percent = c->get<uint32_t>();
  }
  auto layers = j.find("layer_pin_percent");
  if (f.policy == Policy::kFrequency && layers != j.end()) {
    return bad("policy \"frequency\" takes no \"layer_pin_percent\" (that is policy \"window\")");
  }
  if (f.policy == Policy::kWindow) {
    if (layers == j.end() || !layers->is_array() || layers->empty()) {
      return bad("policy \"window\" needs \"layer_pin_percent\": one percent per Engram layer");
    }
    double sum = 0;
    for (size_t l = 0; l < layers->size(); ++l) {
      const json& v = (*layers)[l];
      if (!v.is_number() || !(v.get<double>() >= 0 && v.get<double>() <= 100)) {
        return bad(absl::StrCat("\"layer_pin_percent\"[", l, "] must be a number 0..100"));
      }
      f.layer_pin_percent.push_back(v.get<double>());
      sum += v.get<double>();
    }
    if (sum > 100 * (1 + kTierPlanSlack)) {
      return bad(absl::StrCat("\"layer_pin_percent\" sums to ", sum, ", over 100"));
    }
  }
  if (auto b = j.find("ram_budget_bytes"); b != j.end()) {
    if (!b->is_number_unsigned()) return bad("\"ram_budget_bytes\" must be a whole number");
    f.ram_budget_bytes = b->get<uint64_t>();
  }
  if (auto w = j.find("predicted_exposed_wait_percent"); w != j.end()) {
    if (!w->is_number()) return bad("\"predicted_exposed_wait_percent\" must be a number");
    f.predicted_exposed_wait_percent = w->get<double>();
  }
  return f;
}

absl::StatusOr<TierPlanFile> TierPlanFile::Load(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("tier plan ", path, ": ", text.status().message()));
  }
  absl::StatusOr<TierPlanFile> f = FromJson(*text);
  if (!f.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tier plan ", path, ": ", f.status().message()));
  }
  return f;
}

absl::Status TierPlanFile::Save(const std::string& path) const {
  return WriteFileAtomically(path, ToJson());
}

StoreIdentity StoreIdentity::From(const ShardMap& map, const ShardInfo& info) {
  return {map.table, map.version, map.n_shards, info.shard_index, info.source_checksum};
}

std::string StoreIdentity::Encode() const {
  return json{{"table", table},
              {"version", version},
              {"n_shards", n_shards},
              {"shard_index", shard_index},
              {"source_checksum", source_checksum}}
      .dump();
}

absl::StatusOr<StoreIdentity> StoreIdentity::Decode(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  StoreIdentity id;
  if (j.is_discarded() || !j.is_object() || !Get(j, "table", &json::is_string, &id.table).ok() ||
      !Get(j, "version", &json::is_number_unsigned, &id.version).ok() ||
      !Get(j, "n_shards", &json::is_number_unsigned, &id.n_shards).ok() ||
      !Get(j, "shard_index", &json::is_number_unsigned, &id.shard_index).ok() ||
      !Get(j, "source_checksum", &json::is_string, &id.source_checksum).ok()) {
    return absl::DataLossError("the store's identity record is malformed");
  }
  return id;
}

rocksdb::Options ShardDbOptions(const ShardDbTuning& tuning) {
  rocksdb::BlockBasedTableOptions t;
  t.block_size = 4096;
  t.block_align = true;  // no block straddles a 4 KiB page
  t.checksum = rocksdb::kXXH3;
  t.format_version = 5;
  t.filter_policy = nullptr;  // every key looked up exists
  t.index_type = rocksdb::BlockBasedTableOptions::kBinarySearch;
  t.cache_index_and_filter_blocks = false;  // the table reader owns the index
  if (tuning.block_cache_bytes > 0) {
    t.block_cache = rocksdb::NewLRUCache(tuning.block_cache_bytes);
  } else {
    t.no_block_cache = true;
  }

  rocksdb::Options o;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  o.compression = rocksdb::kNoCompression;
  o.bottommost_compression = rocksdb::kNoCompression;
  o.disable_auto_compactions = true;
  o.max_open_files = -1;  // keep every table reader (and its index) open
  // Table readers (each file's index: blocks kept for the store's life)
  // built on the opening thread, not on up to 16 helper threads that live
  // for the open alone: their blocks then come from that thread's malloc
  // arena instead of from whichever arenas the helpers got, and a shard's
  // memory does not wander from one table version to the next
  // (docs/reliability.md, "Soak").
  o.max_file_opening_threads = 1;
  o.use_direct_reads = tuning.direct_io;
  o.allow_mmap_reads = tuning.mmap_reads && !tuning.direct_io;
  o.skip_stats_update_on_db_open = true;
  o.paranoid_checks = true;
  o.info_log_level = rocksdb::WARN_LEVEL;
  o.keep_log_file_num = 2;
  if (tuning.statistics) {
    o.statistics = rocksdb::CreateDBStatistics();
    // Only tickers are exported; timing every MultiGet for histograms cost
    // ~1.3% of a shard's CPU on a tail served from the page cache (perf).
    o.statistics->set_stats_level(rocksdb::StatsLevel::kExceptHistogramOrTimers);
  }
  return o;
}

rocksdb::ColumnFamilyOptions CuckooRowsOptions(uint64_t memtable_bytes) {
  rocksdb::ColumnFamilyOptions o;
  rocksdb::CuckooTableOptions t;  // 90% full tables, two hash functions
  t.cuckoo_block_size = 1;
  t.hash_table_ratio = 0.75;
  o.table_factory.reset(rocksdb::NewCuckooTableFactory(t));
  o.compression = rocksdb::kNoCompression;
  o.bottommost_compression = rocksdb::kNoCompression;
  o.disable_auto_compactions = true;
  // Rows arrive sorted: a vector memtable appends, and sorts once at flush.
  o.memtable_factory = std::make_shared<rocksdb::VectorRepFactory>();
  o.write_buffer_size = static_cast<size_t>(memtable_bytes);
  o.max_write_buffer_number = 2;
  // Flushed tables stay in level 0 (nothing compacts them): never stall.
  o.level0_slowdown_writes_trigger = INT_MAX;
  o.level0_stop_writes_trigger = INT_MAX;
  return o;
}

}  // namespace engram
