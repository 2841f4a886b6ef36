// The hot-row profile of a shard: how often each of its rows was accessed
// in a recorded token trace. Written by `engramctl import --profile-trace`,
// read by HotTier to choose the rows it pins.
//
// hot_profile.bin, all integers little-endian:
//   char magic[4] = "EGHP"; u32 version = 1; u64 count;
//   count x { u32 layer; u64 row; u64 count; }   (20 bytes each, packed)
// Entries are sorted by count descending, then by (layer, row) ascending;
// every row belongs to the shard and appears once.
#ifndef ENGRAM_SHARD_HOT_PROFILE_H_
#define ENGRAM_SHARD_HOT_PROFILE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/layout.h"
#include "shard/shard_map.h"

namespace engram {

inline constexpr char kHotProfileMagic[4] = {'E', 'G', 'H', 'P'};
inline constexpr uint32_t kHotProfileVersion = 1;

struct HotProfileEntry {
  uint32_t layer = 0;
  uint64_t row = 0;
  uint64_t count = 0;

  bool operator==(const HotProfileEntry&) const = default;
};

// Replays a token trace (one sequence per line, token ids separated by
// blanks; each line hashed as a fresh sequence from position 0) through
// `layout` and counts the accesses of rows that `shard` owns under `map`.
// Returns the entries in file order (see above). InvalidArgument naming the
// line for a token that is not an integer in [0, vocab_size).
absl::StatusOr<std::vector<HotProfileEntry>> ProfileTrace(
    const std::string& trace_path, const HashLayout& layout,
    const ShardMap& map, uint32_t shard);

// Sorts `entries` into file order and writes them atomically.
absl::Status WriteHotProfile(const std::string& path,
                             std::vector<HotProfileEntry> entries);

// Reads and checks a profile: magic, version, length, order, and (given a
// map) that every row exists and belongs to `shard`. DataLoss for a
// truncated or corrupt file.
absl::StatusOr<std::vector<HotProfileEntry>> ReadHotProfile(
    const std::string& path, const ShardMap& map, uint32_t shard);

}  // namespace engram

#endif  // ENGRAM_SHARD_HOT_PROFILE_H_
