#include "shard/footprint.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"
#include "shard/hot_tier.h"
#include "shard/shard_format.h"

namespace engram {

uint64_t StoreFixedBytes(const std::vector<std::pair<std::string, double>>& store_stats) {
  for (const auto& [name, value] : store_stats) {
    if (name == "rocksdb_index_memory_bytes") return static_cast<uint64_t>(value);
  }
  return 0;
}

ShardFootprint FootprintOf(const RowStore& store) {
  ShardFootprint f;
  f.fixed_bytes = StoreFixedBytes(store.Stats());
  f.whole_tier_bytes = HotTierWholeShardBytes(store.shard_map(), store.shard_index());
  return f;
}

absl::StatusOr<ShardFootprint> MeasureShardFootprint(const std::string& dir, bool direct_io) {
  ASSIGN_OR_RETURN(ShardInfo info, ShardInfo::Load(absl::StrCat(dir, "/", kShardInfoFile)));
  RowStoreOptions options;
  options.direct_io = direct_io && info.tail_format == TailFormat::kBlock;
  options.reader_threads = 1;
  ASSIGN_OR_RETURN(std::unique_ptr<RowStore> store, RowStore::Open(dir, options));
  return FootprintOf(*store);
}

}  // namespace engram
