// The on-disk format of a shard directory, shared by the importer (writer)
// and RowStore (reader):
//
//   shard_map.json   the table's partitioning (ShardMap)
//   shard.json       which shard this is and what it holds (ShardInfo)
//   rocksdb/         the rows: key ShardKey(layer, row), value the stored row
//                    (in the tail format of shard.json, TailFormat below);
//                    plus one StoreIdentity record
//   hot_profile.bin  optional access counts (common/format/hot_profile.h)
//   tier_plan.json   optional placement of the hot tier (TierPlanFile)
//
// The RocksDB options live here too so both sides agree on them; each choice
// and its measured effect is written down in docs/table-format.md.
#ifndef ENGRAM_SHARD_SHARD_FORMAT_H_
#define ENGRAM_SHARD_SHARD_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/codec/row_encoding.h"
#include "common/format/shard_map.h"
#include "rocksdb/options.h"

namespace engram {

inline constexpr char kShardInfoFile[] = "shard.json";
inline constexpr char kShardDbDir[] = "rocksdb";
inline constexpr char kHotProfileFile[] = "hot_profile.bin";
inline constexpr char kTierPlanFile[] = "tier_plan.json";
inline constexpr char kShardFormat[] = "engram-shard";
inline constexpr int kShardFormatVersion = 1;

// How a shard's rows sit in its RocksDB, chosen at import
// (`engramctl import --tail-format`) and recorded in shard.json:
//
//   kBlock   the default column family holds rows and identity record in
//            block-based tables (4 KiB blocks, XXH3 block checksums): read
//            with pread, mmap or O_DIRECT; suits a tail larger than RAM.
//   kCuckoo  rows in column family kRowsColumnFamily as CuckooTables (one
//            hash probe a row, read through mmap only, so not with
//            --direct-io), each value the row followed by its
//            RowChecksum (the format has no block checksums); the identity
//            record alone in the default column family (block-based). Less
//            CPU a row than kBlock when the page cache holds the tail
//            (docs/table-format.md, "Tail formats").
enum class TailFormat { kBlock, kCuckoo };

inline constexpr char kRowsColumnFamily[] = "rows";
inline constexpr size_t kRowChecksumBytes = 4;

// "block" / "cuckoo".
const char* TailFormatName(TailFormat format);
// InvalidArgument naming the accepted values for anything else.
absl::StatusOr<TailFormat> ParseTailFormat(std::string_view name);

// The checksum a cuckoo row carries after its bytes (little-endian): the
// low 32 bits of XXH3-64 over the row, seeded with its key.
uint32_t RowChecksum(uint64_t key, const uint8_t* row, size_t n);
// A kCuckoo value: the row's n bytes, then its RowChecksum. Encode writes
// it into *value; Intact checks one (REQUIRES: n + kRowChecksumBytes bytes
// at value).
void EncodeCuckooValue(uint64_t key, const uint8_t* row, size_t n, std::string* value);
bool CuckooValueIntact(uint64_t key, const char* value, size_t n);
// How a read names a row whose RowChecksum fails ("shard S: layer L row R "
// then this), on every read.
inline constexpr char kRowChecksumFailure[] = "fails its row checksum (the table file is damaged)";

// What one shard directory holds. A plain value type.
struct ShardInfo {
  struct Layer {
    int64_t layer_id = 0;     // transformer layer, for humans
    uint64_t rows_owned = 0;  // == ShardMap::RowsOnShard
    // XXH3-64 over this shard's rows of the layer in row order,
    // "xxh3_64:<16 hex>".
    std::string checksum;
    // How the stored rows encode their values (common/codec/row_encoding.h);
    // "encoding" in shard.json, absent (shards written before encodings)
    // = kFp8.
    RowEncoding encoding = RowEncoding::kFp8;
  };

  uint32_t shard_index = 0;
  std::vector<Layer> layers;
  // Identity of the source: XXH3-64 over the source's per-layer checksums
  // (whole-table, as in the table manifest), in layer order.
  std::string source_checksum;
  // Import options that shape the content; a re-import with equal values
  // (and an equal shard map) is a no-op.
  std::string source_kind;       // "table", "checkpoint" or "gguf"
  std::string profile_checksum;  // of the --profile-trace file; "" = none
  // "import.tail_format" in shard.json; absent (shards written before the
  // choice existed) = kBlock.
  TailFormat tail_format = TailFormat::kBlock;
  // Informational: where the rows came from.
  std::string source_path;

  // shard_index < map.n_shards, one layer per map layer, rows_owned equal
  // to map.RowsOnShard, checksums well-formed. FailedPrecondition naming the
  // mismatch.
  absl::Status Validate(const ShardMap& map) const;
  // Same shard of the same source imported the same way (source_path
  // ignored).
  bool SameImport(const ShardInfo& other) const;

  std::string ToJson() const;
  static absl::StatusOr<ShardInfo> FromJson(std::string_view text);
  static absl::StatusOr<ShardInfo> Load(const std::string& path);
  absl::Status Save(const std::string& path) const;  // atomic
};

// tier_plan.json: where the hot tier spends its budget, written by
// `engramctl plan --write-tier-plan` for the budget it planned
// (docs/table-format.md, "tier_plan.json"):
//
//   {"policy": "window", "cache_share_percent": 20,
//    "layer_pin_percent": [70.0, 30.0], "ram_budget_bytes": 25165824,
//    "predicted_exposed_wait_percent": 0.8}
//
// policy "window": layer_pin_percent, one per Engram layer, each in
// [0, 100], summing to at most 100: each layer's percent of the pinned
// budget (HotTierOptions::layer_pin_shares). policy "frequency": no
// layer_pin_percent, the profile's order across layers. cache_share_percent
// (optional, 0-100) replaces engram-shard's --hot-cache-share. The last two
// members are optional and informational: the budget the plan was chosen
// for (engram-shard warns when its --ram-budget differs) and its
// prediction. Any other member is an error (a misspelt one would otherwise
// be ignored).
struct TierPlanFile {
  enum class Policy { kFrequency, kWindow };
  Policy policy = Policy::kFrequency;
  std::optional<uint32_t> cache_share_percent;
  std::vector<double> layer_pin_percent;  // policy kWindow only
  uint64_t ram_budget_bytes = 0;          // 0 = not given
  std::optional<double> predicted_exposed_wait_percent;

  // HotTierOptions::layer_pin_shares: layer_pin_percent / 100 (empty for
  // kFrequency).
  std::vector<double> layer_pin_shares() const;

  std::string ToJson() const;
  // InvalidArgument naming the member that is wrong and what it must be.
  static absl::StatusOr<TierPlanFile> FromJson(std::string_view text);
  // FromJson's errors as "tier plan PATH: ..."; NotFound when absent.
  static absl::StatusOr<TierPlanFile> Load(const std::string& path);
  absl::Status Save(const std::string& path) const;  // atomic
};

// A record stored in the DB itself under key kStoreIdentityKey (after every
// row key), so a store can be matched against the JSON files next to it: a
// shard.json copied next to another shard's rocksdb/ is refused.
inline constexpr uint64_t kStoreIdentityKey = ~uint64_t{0};

struct StoreIdentity {
  std::string table;
  uint64_t version = 0;
  uint32_t n_shards = 0;
  uint32_t shard_index = 0;
  std::string source_checksum;

  static StoreIdentity From(const ShardMap& map, const ShardInfo& info);
  std::string Encode() const;  // one-line JSON
  static absl::StatusOr<StoreIdentity> Decode(std::string_view text);
  bool operator==(const StoreIdentity&) const = default;
};

// Tuning knobs of the shard DB that differ between runs; everything else is
// fixed by ShardDbOptions.
struct ShardDbTuning {
  bool direct_io = false;  // use_direct_reads
  // allow_mmap_reads (ignored with direct_io): a buffered read is then a
  // page-cache lookup through the mapping, not a pread syscall and a copy.
  bool mmap_reads = false;
  size_t block_cache_bytes = 0;  // 0 = no block cache
  bool statistics = false;       // attach rocksdb::Statistics
};

// The options every shard DB is written and opened with: 4 KiB aligned,
// uncompressed blocks with XXH3 checksums, a binary-search index held by the
// table reader, no filter, all table readers kept open, auto compactions off.
rocksdb::Options ShardDbOptions(const ShardDbTuning& tuning);

// The options of a kCuckoo shard's rows column family: CuckooTables,
// uncompressed, written through memtables of `memtable_bytes` (each flush
// one table; the DB needs allow_mmap_reads to read them).
rocksdb::ColumnFamilyOptions CuckooRowsOptions(uint64_t memtable_bytes);

}  // namespace engram

#endif  // ENGRAM_SHARD_SHARD_FORMAT_H_
