// LocalCache: the worker-side hot-row cache of the client library.
//
// Holds the hottest rows of the shards' hot-row profiles in one contiguous
// arena with an open-addressing index, so the most frequent n-grams never
// cross the network. Built once (rows fetched from the shards at Create, by
// one step of the client's StepPool), immutable afterwards: lookups are
// lock-free and thread-safe. Steps consult it through Contains and Find.
#ifndef ENGRAM_CLIENT_LOCAL_CACHE_H_
#define ENGRAM_CLIENT_LOCAL_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/format/shard_map.h"
#include "common/util/key_index.h"

namespace engram {

class StepPool;

class LocalCache {
 public:
  // Picks the rows the hot-row profiles `profiles` (shard s's at s, as
  // ClientOptions::worker_cache_profiles) count most often until `bytes`
  // are used, and fetches them with one step of `steps`.
  // InvalidArgument unless there is one profile per shard of `map`; a
  // profile's read error; the fetch's error, prefixed "filling the local
  // cache: ". REQUIRES: `steps` consults no local cache yet.
  static absl::StatusOr<std::unique_ptr<LocalCache>> Build(const std::vector<std::string>& profiles,
                                                           uint64_t bytes, const ShardMap& map,
                                                           StepPool& steps);

  bool Contains(uint32_t layer, uint64_t row) const {
    return index_.Find(ShardKey(layer, row)) != KeySlotIndex::kNoSlot;
  }
  // The row's stored bytes; REQUIRES: Contains(layer, row).
  const uint8_t* Find(uint32_t layer, uint64_t row) const {
    return arena_.data() + offsets_[index_.Find(ShardKey(layer, row))];
  }
  uint64_t bytes() const { return arena_.size(); }
  uint64_t rows() const { return offsets_.size(); }

 private:
  KeySlotIndex index_;             // key -> index into offsets_
  std::vector<uint64_t> offsets_;  // row's bytes in arena_
  std::vector<uint8_t> arena_;
};

}  // namespace engram

#endif  // ENGRAM_CLIENT_LOCAL_CACHE_H_
