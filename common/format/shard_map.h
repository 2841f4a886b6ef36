// The shard map: how a table's rows are partitioned over shard servers.
//
// Row r of every Engram layer lives on shard r % n_shards. `engramctl import`
// writes the map (shard_map.json) into every shard directory it builds; the
// server refuses to start on data that does not match it, and the client
// routes with it. Replica addresses are deployment data, filled in by whoever
// deploys (the demo, Helm values); the store itself never needs them.
#ifndef ENGRAM_COMMON_FORMAT_SHARD_MAP_H_
#define ENGRAM_COMMON_FORMAT_SHARD_MAP_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace engram {

inline constexpr char kShardMapFile[] = "shard_map.json";

// Limits imposed by the key encoding (see ShardKey). Layer 0xffff is
// reserved: the key ~0 holds the store's identity record.
inline constexpr size_t kMaxShardLayers = (size_t{1} << 16) - 1;
inline constexpr uint64_t kMaxShardRowId = uint64_t{1} << 48;

// The store key of a row: layer << 48 | row, written as 8 big-endian bytes
// so RocksDB's bytewise order is (layer, row) order.
inline constexpr size_t kShardKeyBytes = 8;
inline uint64_t ShardKey(uint32_t layer, uint64_t row) { return uint64_t{layer} << 48 | row; }
// The layer and the row of a ShardKey.
inline uint32_t ShardKeyLayer(uint64_t key) { return static_cast<uint32_t>(key >> 48); }
inline uint64_t ShardKeyRow(uint64_t key) { return key & (kMaxShardRowId - 1); }
inline void EncodeShardKey(uint64_t key, char* out) {
  for (int i = 7; i >= 0; --i, key >>= 8) out[i] = static_cast<char>(key & 0xff);
}
inline uint64_t DecodeShardKey(const char* in) {
  uint64_t key = 0;
  for (int i = 0; i < 8; ++i) key = key << 8 | static_cast<uint8_t>(in[i]);
  return key;
}

struct ShardMap {
  std::string table;
  uint64_t version = 0;
  uint32_t n_shards = 0;
  std::vector<uint64_t> layer_rows;  // rows of each layer's whole table
  std::vector<uint32_t> row_bytes;   // stored bytes per row, per layer
  // Optional: [n_shards][replica] "host:port" addresses.
  std::vector<std::vector<std::string>> replicas;

  uint32_t ShardOf(uint64_t row) const { return static_cast<uint32_t>(row % n_shards); }
  // Rows of `layer` owned by `shard`: ceil((layer_rows - shard) / n_shards).
  uint64_t RowsOnShard(uint32_t layer, uint32_t shard) const;

  // table non-empty, version >= 1, n_shards >= 1, one row_bytes per layer,
  // rows and layers within the key encoding, replicas empty or n_shards long.
  absl::Status Validate() const;
  // Parses and validates shard_map.json text (nested at most
  // kMaxJsonDepth deep; every integer within its field's type).
  static absl::StatusOr<ShardMap> FromJson(std::string_view text);
  static absl::StatusOr<ShardMap> Load(const std::string& path);
  // Atomic: writes a temporary file, then renames it over `path`.
  absl::Status Save(const std::string& path) const;
  std::string ToJson() const;
  // Same table, version, shard count and geometry (replicas ignored).
  bool SameData(const ShardMap& other) const;
};

}  // namespace engram

#endif  // ENGRAM_COMMON_FORMAT_SHARD_MAP_H_
