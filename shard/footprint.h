// ShardFootprint: the RAM a shard server's table needs, for sizing its
// --ram-budget (ShardServerOptions::ram_budget_bytes).
//
// A budget is spent in this order: RocksDB's index of the shard's table
// files (its table readers: index and filter blocks, resident as long as
// the store is open, whatever the hot tier holds), then the hot tier. A
// budget below the first part is refused; one of at least
// whole_shard_budget() pins every row, so the tail is never read, at this
// and every later open of the store.
#ifndef ENGRAM_SHARD_FOOTPRINT_H_
#define ENGRAM_SHARD_FOOTPRINT_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "shard/row_store.h"

namespace engram {

struct ShardFootprint {
  uint64_t fixed_bytes = 0;       // RocksDB's index of the table files
  uint64_t whole_tier_bytes = 0;  // the hot tier that pins every row (HotTierWholeShardBytes)

  // RocksDB's estimate of its index counts the usable size of each
  // allocation, which moves by a few bytes from one open of the store to
  // the next (16 of 4,768 seen), so a budget advised from one open must
  // hold at the next: fixed_bytes / 256 + 64 KiB to spare.
  uint64_t slack_bytes() const { return fixed_bytes / 256 + (uint64_t{64} << 10); }
  // The budget to advise for pinning every row: the index, the whole tier
  // and the slack.
  uint64_t whole_shard_budget() const { return fixed_bytes + whole_tier_bytes + slack_bytes(); }
  // The budget of `share` of the whole-shard one (1 = every row pinned),
  // never below the fixed bytes a shard server refuses to start under.
  // REQUIRES: share > 0.
  uint64_t share_budget(double share) const {
    return std::max(
        fixed_bytes,
        static_cast<uint64_t>(std::llround(share * static_cast<double>(whole_shard_budget()))));
  }
  // Whether `budget` pins every row with the index as measured here (no
  // slack: the test a shard server makes of its own store).
  bool HoldsWholeShard(uint64_t budget) const {
    return budget >= fixed_bytes && budget - fixed_bytes >= whole_tier_bytes;
  }
};

// The fixed part of a store's footprint, read from its RowStore::Stats()
// (rocksdb_index_memory_bytes).
uint64_t StoreFixedBytes(const std::vector<std::pair<std::string, double>>& store_stats);

// The footprint of `store`'s shard.
ShardFootprint FootprintOf(const RowStore& store);

// Opens shard directory `dir` read-only as a shard server would (with
// direct_io, O_DIRECT for a block tail; a cuckoo tail through mmap) and
// returns its footprint. The store is closed again before returning.
absl::StatusOr<ShardFootprint> MeasureShardFootprint(const std::string& dir, bool direct_io);

}  // namespace engram

#endif  // ENGRAM_SHARD_FOOTPRINT_H_
