// The hot-row profile file of a shard: how often each of its rows was
// accessed in a recorded token trace. Written by `engramctl import
// --profile-trace` (ProfileTrace, shard/import/importer.h, counts the trace), read
// by the shard's HotTier to choose the rows it pins and by the client's
// local cache to choose the rows it keeps.
//
// hot_profile.bin, all integers little-endian:
//   char magic[4] = "EGHP"; u32 version = 1; u64 count;
//   count x { u32 layer; u64 row; u64 count; }   (20 bytes each, packed)
// Entries are sorted by count descending, then by (layer, row) ascending;
// every row belongs to the shard and appears once.
#ifndef ENGRAM_COMMON_FORMAT_HOT_PROFILE_H_
#define ENGRAM_COMMON_FORMAT_HOT_PROFILE_H_

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/format/shard_map.h"

namespace engram {

inline constexpr char kHotProfileMagic[4] = {'E', 'G', 'H', 'P'};
inline constexpr uint32_t kHotProfileVersion = 1;

struct HotProfileEntry {
  uint32_t layer = 0;
  uint64_t row = 0;
  uint64_t count = 0;

  bool operator==(const HotProfileEntry&) const = default;
};

// File order: count descending, then (layer, row) ascending.
bool HotProfileOrder(const HotProfileEntry& a, const HotProfileEntry& b);

// The file bytes of `entries`, which must be in file order.
std::string EncodeHotProfile(const std::vector<HotProfileEntry>& entries);

// Sorts `entries` into file order and writes them atomically.
absl::Status WriteHotProfile(const std::string& path, std::vector<HotProfileEntry> entries);

// Checks and decodes the bytes of a profile: magic, version, length, order
// (which also rules out a row listed twice), and that every row exists in
// `map` and belongs to `shard`. DataLoss for a truncated or corrupt file,
// InvalidArgument for an invalid map; messages start with "hot profile
// <what>". Allocates only what the length of `data` justifies.
absl::StatusOr<std::vector<HotProfileEntry>> ParseHotProfile(std::string_view data,
                                                             const ShardMap& map, uint32_t shard,
                                                             std::string_view what);
// ParseHotProfile of the file at `path` (NotFound if absent), read and
// checked whole in bounded chunks, returning only its first `max_entries`
// entries (the hottest): memory is those entries, not the file.
absl::StatusOr<std::vector<HotProfileEntry>> ReadHotProfile(
    const std::string& path, const ShardMap& map, uint32_t shard,
    uint64_t max_entries = std::numeric_limits<uint64_t>::max());

}  // namespace engram

#endif  // ENGRAM_COMMON_FORMAT_HOT_PROFILE_H_
