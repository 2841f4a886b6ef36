// LocalCache: the worker-side hot-row cache of the client library.
//
// Holds the hottest rows of the shards' hot-row profiles in one contiguous
// arena with an open-addressing index, so the most frequent n-grams never
// cross the network. Built once (rows fetched from the shards at Create),
// immutable afterwards: lookups are lock-free and thread-safe.
#ifndef ENGRAM_CLIENT_LOCAL_CACHE_H_
#define ENGRAM_CLIENT_LOCAL_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/util/key_index.h"

namespace engram {

class EngramClient;

class LocalCache {
 public:
  // Picks rows by count from ClientOptions::local_cache_profiles until
  // local_cache_bytes is used, and fetches them through `client`.
  static absl::StatusOr<std::unique_ptr<LocalCache>> Build(EngramClient& client);

  bool Contains(uint32_t layer, uint64_t row) const {
    return index_.Find(Key(layer, row)) != KeySlotIndex::kNoSlot;
  }
  // The row's stored bytes; REQUIRES: Contains(layer, row).
  const uint8_t* Find(uint32_t layer, uint64_t row) const {
    return arena_.data() + offsets_[index_.Find(Key(layer, row))];
  }
  uint64_t bytes() const { return arena_.size(); }
  uint64_t rows() const { return offsets_.size(); }

 private:
  static uint64_t Key(uint32_t layer, uint64_t row) {
    return (static_cast<uint64_t>(layer) << 48) | row;
  }

  KeySlotIndex index_;             // key -> index into offsets_
  std::vector<uint64_t> offsets_;  // row's bytes in arena_
  std::vector<uint8_t> arena_;
};

}  // namespace engram

#endif  // ENGRAM_CLIENT_LOCAL_CACHE_H_
