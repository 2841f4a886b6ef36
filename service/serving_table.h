// ServingTable: one table version as a shard server serves it, the shard's
// RocksDB store and its RAM hot tier (internal to service/).
//
// StoreService holds the current one through a shared_ptr; every Lookup
// takes a reference when it starts and keeps it until it has answered, so a
// switch to another version (ShardServer::Activate) never changes the rows
// of a request in flight, and the old version's files are closed once its
// last request is done. Immutable after construction (the hot tier's own
// admission cache aside, which is thread-safe); thread-safe.
#ifndef ENGRAM_SERVICE_SERVING_TABLE_H_
#define ENGRAM_SERVICE_SERVING_TABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "common/format/shard_map.h"
#include "shard/hot_tier.h"
#include "shard/row_store.h"

namespace engram {

class ServingTable {
 public:
  // REQUIRES: `tier` was built over `store`.
  ServingTable(std::string dir, std::unique_ptr<RowStore> store, std::unique_ptr<HotTier> tier)
      : dir_(std::move(dir)), store_(std::move(store)), tier_(std::move(tier)) {}
  ~ServingTable() {
    tier_.reset();  // before the store it was built over
    store_.reset();
  }
  ServingTable(const ServingTable&) = delete;
  ServingTable& operator=(const ServingTable&) = delete;

  const std::string& dir() const { return dir_; }
  RowStore& store() const { return *store_; }
  HotTier& tier() const { return *tier_; }
  const ShardMap& map() const { return store_->shard_map(); }
  uint32_t shard_index() const { return store_->shard_index(); }
  uint64_t version() const { return map().version; }

 private:
  const std::string dir_;
  std::unique_ptr<RowStore> store_;
  std::unique_ptr<HotTier> tier_;
};

}  // namespace engram

#endif  // ENGRAM_SERVICE_SERVING_TABLE_H_
