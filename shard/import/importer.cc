#include "shard/import/importer.h"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/format/hot_profile.h"
#include "common/format/table.h"
#include "common/format/token_trace.h"
#include "common/hash/engram_hash.h"
#include "common/util/file_util.h"
#include "common/util/status_macros.h"
#include "shard/import/row_sink.h"
#include "shard/import/row_source.h"

namespace engram {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<RowSource>> OpenSource(const ImportOptions& o) {
  return RowSource::Open({.table_dir = o.table_dir,
                          .checkpoint_dir = o.checkpoint_dir,
                          .gguf_path = o.gguf_path,
                          .version = o.version});
}

// The options besides the source (RowSource::Open checks that one is given).
absl::Status CheckOptions(const ImportOptions& o) {
  if (o.n_shards == 0) {
    return absl::InvalidArgumentError("--shards must be at least 1");
  }
  if (o.shard_index >= o.n_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shard-index ", o.shard_index, " must be below --shards ", o.n_shards,
                     " (shards are numbered 0..", o.n_shards - 1, ")"));
  }
  if (o.out_dir.empty()) return absl::InvalidArgumentError("--out is required");
  if (o.chunk_rows == 0 || o.sst_file_bytes == 0) {
    return absl::InvalidArgumentError("chunk_rows and sst_file_bytes must be > 0");
  }
  return absl::OkStatus();
}

// What an existing --out holds: nothing usable (ok, proceed), the same import
// (*same = true), or something else (error).
absl::Status CheckExistingOut(const ImportOptions& o, const ShardMap& map, const RowSource& src,
                              const std::string& profile_sum, const ImportProgress& progress,
                              bool* same) {
  *same = false;
  std::error_code ec;
  const fs::file_status st = fs::status(o.out_dir, ec);
  if (!fs::exists(st)) return absl::OkStatus();
  const std::string info_path = (fs::path(o.out_dir) / kShardInfoFile).string();
  if (!fs::exists(info_path, ec)) {
    if (fs::is_directory(st) && fs::is_empty(o.out_dir, ec)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("--out ", o.out_dir,
                                                      " exists and is not a shard directory; pick "
                                                      "another --out or delete it"));
  }
  absl::StatusOr<ShardInfo> old = ShardInfo::Load(info_path);
  absl::StatusOr<ShardMap> old_map = ShardMap::Load((fs::path(o.out_dir) / kShardMapFile).string());
  std::string differs;
  if (!old.ok() || !old_map.ok()) {
    differs = "holds an unreadable shard";
  } else if (!old_map->SameData(map) || old->shard_index != o.shard_index) {
    differs = absl::StrCat("holds shard ", old->shard_index, " of ", old_map->n_shards,
                           " of table ", old_map->table, " v", old_map->version);
  } else if (old->source_kind != src.kind() || old->profile_checksum != profile_sum ||
             old->tail_format != o.tail_format) {
    differs =
        "holds this shard imported with other options (source kind, "
        "profile trace or tail format)";
  } else {
    std::vector<std::string> sums;
    for (const LayerInfo& l : src.manifest().layers) sums.push_back(l.checksum);
    if (sums.empty() || sums[0].empty()) {  // no checksums of its own: checksum the source
      ASSIGN_OR_RETURN(sums, StreamSource(src, o.chunk_rows, progress, nullptr));
    }
    if (SourceChecksum(sums) == old->source_checksum) {
      *same = true;
      return absl::OkStatus();
    }
    differs = "holds this shard imported from different data";
  }
  return absl::FailedPreconditionError(absl::StrCat("--out ", o.out_dir, " already exists and ",
                                                    differs, "; pick another --out or delete it"));
}

// Removes a directory on scope exit unless released.
class TreeGuard {
 public:
  explicit TreeGuard(std::string path) : path_(std::move(path)) {}
  ~TreeGuard() {
    if (!path_.empty()) (void)RemoveTree(path_);
  }
  void Release() { path_.clear(); }

 private:
  std::string path_;
};

// Builds the whole shard directory at `tmp`.
absl::Status BuildShard(const ImportOptions& o, const RowSource& src, const ShardMap& map,
                        ImportResult* result, const ImportProgress& progress,
                        const std::string& tmp) {
  const std::string staging = tmp + "/ingest";
  std::error_code ec;
  if (!fs::create_directories(staging, ec)) {
    return absl::InternalError(absl::StrCat("cannot create ", staging, ": ", ec.message()));
  }
  ShardInfo& info = result->info;
  info.shard_index = o.shard_index;
  const TableManifest& m = src.manifest();
  info.source_kind = src.kind();
  info.source_path = fs::absolute(src.path(), ec).string();
  info.layers.resize(m.layers.size());
  info.tail_format = o.tail_format;
  const std::string db_dir = tmp + "/" + kShardDbDir;
  ASSIGN_OR_RETURN(std::unique_ptr<RowSink> sink,
                   RowSink::Create(o.tail_format, staging, db_dir, o.sst_file_bytes));
  std::vector<XXH3_state_t*> owned(info.layers.size());
  for (XXH3_state_t*& st : owned) {
    st = XXH3_createState();
    XXH3_64bits_reset(st);
  }
  auto put_owned = [&](int l, uint64_t first, uint64_t n, const uint8_t* rows) -> absl::Status {
    const uint64_t rb = static_cast<uint64_t>(m.layers[l].row_bytes);
    // The first row >= first that this shard owns, then every n_shards-th.
    uint64_t r = first + (o.shard_index + map.n_shards - first % map.n_shards) % map.n_shards;
    for (; r < first + n; r += map.n_shards) {
      const uint8_t* row = rows + (r - first) * rb;
      RETURN_IF_ERROR(sink->PutRow(ShardKey(l, r), row, rb));
      XXH3_64bits_update(owned[l], row, rb);
      ++info.layers[l].rows_owned;
    }
    return absl::OkStatus();
  };
  absl::StatusOr<std::vector<std::string>> source_sums =
      StreamSource(src, o.chunk_rows, progress, put_owned);
  for (size_t l = 0; l < owned.size(); ++l) {
    info.layers[l].layer_id = m.layers[l].layer_id;
    info.layers[l].encoding = m.layers[l].encoding;
    info.layers[l].checksum = FormatChecksum(XXH3_64bits_digest(owned[l]));
    XXH3_freeState(owned[l]);
  }
  if (!source_sums.ok()) return source_sums.status();
  info.source_checksum = SourceChecksum(*source_sums);
  result->rows_written = sink->rows();
  RETURN_IF_ERROR(sink->Finish(StoreIdentity::From(map, info).Encode()));
  result->sst_files = sink->files();
  RETURN_IF_ERROR(RemoveTree(staging));

  if (!o.profile_trace.empty()) {
    ASSIGN_OR_RETURN(std::vector<HotProfileEntry> prof,
                     ProfileTrace(o.profile_trace, m.layout, map, o.shard_index));
    result->profile_rows = prof.size();
    RETURN_IF_ERROR(WriteHotProfile(tmp + "/" + kHotProfileFile, std::move(prof)));
  }
  RETURN_IF_ERROR(map.Save(tmp + "/" + kShardMapFile));
  // shard.json last: its presence marks a complete shard directory.
  RETURN_IF_ERROR(info.Save(tmp + "/" + kShardInfoFile));
  return SyncDir(tmp);
}

}  // namespace

absl::StatusOr<ImportResult> ImportShard(const ImportOptions& o, const ImportProgress& progress) {
  RETURN_IF_ERROR(CheckOptions(o));
  ASSIGN_OR_RETURN(std::unique_ptr<RowSource> source, OpenSource(o));
  const RowSource& src = *source;
  ImportResult result;
  result.unserved_tensors = src.UnservedTensors();
  ShardMap& map = result.map;
  map.table = src.manifest().table;
  map.version = src.manifest().version;
  map.n_shards = o.n_shards;
  for (const LayerInfo& l : src.manifest().layers) {
    map.layer_rows.push_back(l.rows);
    map.row_bytes.push_back(static_cast<uint32_t>(l.row_bytes));
  }
  RETURN_IF_ERROR(map.Validate());

  std::string profile_sum;
  if (!o.profile_trace.empty()) {
    ASSIGN_OR_RETURN(uint64_t h, HashFile(o.profile_trace));
    profile_sum = FormatChecksum(h);
  }
  bool same = false;
  RETURN_IF_ERROR(CheckExistingOut(o, map, src, profile_sum, progress, &same));
  if (same) {
    result.already_imported = true;
    ASSIGN_OR_RETURN(ShardInfo info,
                     ShardInfo::Load((fs::path(o.out_dir) / kShardInfoFile).string()));
    result.info = std::move(info);
    return result;
  }

  std::error_code ec;
  fs::path out = fs::absolute(o.out_dir, ec).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "dir/"
  const fs::path parent = out.parent_path();
  if (!fs::is_directory(parent, ec)) {
    return absl::NotFoundError(absl::StrCat("the parent directory of --out (", parent.string(),
                                            ") does not exist; create it first"));
  }
  const std::string tmp =
      (parent / absl::StrCat(".", out.filename().string(), ".import-", ::getpid())).string();
  RETURN_IF_ERROR(RemoveTree(tmp));  // a crashed earlier run
  TreeGuard guard(tmp);
  result.info.profile_checksum = profile_sum;
  RETURN_IF_ERROR(BuildShard(o, src, map, &result, progress, tmp));
  // rename(2) replaces an empty directory and fails on a non-empty one, so
  // data that appeared meanwhile is never replaced.
  if (::rename(tmp.c_str(), out.c_str()) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot move the finished shard into ",
                                                      out.string(), ": ", std::strerror(errno),
                                                      "; pick another --out or delete it"));
  }
  guard.Release();
  RETURN_IF_ERROR(SyncDir(parent.string()));
  return result;
}

absl::StatusOr<std::vector<HotProfileEntry>> ProfileTrace(const std::string& trace_path,
                                                          const HashLayout& layout,
                                                          const ShardMap& map, uint32_t shard) {
  ASSIGN_OR_RETURN(std::unique_ptr<NgramHasher> hasher, NgramHasher::Create(layout));
  std::ifstream in(trace_path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open profile trace ", trace_path));
  }
  const int n_layers = hasher->n_layers();
  const int n_cols = hasher->n_cols();
  absl::flat_hash_map<uint64_t, uint64_t> counts;
  std::vector<int64_t> ids;
  std::vector<RowId> rows;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    RETURN_IF_ERROR(ParseTraceLine(line, layout.vocab_size, trace_path, line_no, &ids));
    if (ids.empty()) continue;
    SequenceState seq(
        std::max<int64_t>(SequenceState::kDefaultCapacity, static_cast<int64_t>(ids.size())));
    rows.resize(ids.size() * n_layers * n_cols);
    if (auto s = hasher->Hash(seq, 0, ids, {}, rows.data()); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(trace_path, ":", line_no, ": ", s.message()));
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      const uint32_t layer = static_cast<uint32_t>((i / n_cols) % n_layers);
      if (map.ShardOf(rows[i]) == shard) ++counts[ShardKey(layer, rows[i])];
    }
  }
  if (in.bad()) {
    return absl::InternalError(absl::StrCat("cannot read ", trace_path));
  }
  std::vector<HotProfileEntry> out;
  out.reserve(counts.size());
  for (const auto& [key, count] : counts) {
    out.push_back({ShardKeyLayer(key), ShardKeyRow(key), count});
  }
  std::sort(out.begin(), out.end(), HotProfileOrder);
  return out;
}

}  // namespace engram
