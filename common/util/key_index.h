// KeySlotIndex: an open-addressing hash index from 64-bit keys to 32-bit
// slots, for the shard's hot tier and the client's de-duplication and
// local cache. Power-of-two capacity, linear probing, load
// factor <= 0.5 (the capacity is fixed at construction), deletion by
// backward shift (no tombstones). The key kEmptyKey is reserved. Memory:
// 12 bytes per entry, 24-48 bytes per key.
//
// Not synchronised: concurrent Finds are safe only while nothing mutates.
#ifndef ENGRAM_COMMON_UTIL_KEY_INDEX_H_
#define ENGRAM_COMMON_UTIL_KEY_INDEX_H_

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

namespace engram {

class KeySlotIndex {
 public:
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  static constexpr uint32_t kNoSlot = ~uint32_t{0};

  // Room for max_keys keys at load <= 0.5.
  explicit KeySlotIndex(uint64_t max_keys = 0)
      : entries_(CapacityFor(max_keys)), mask_(entries_.size() - 1) {}

  // memory_bytes() of an index made for max_keys keys.
  static uint64_t MemoryBytesFor(uint64_t max_keys) {
    return CapacityFor(max_keys) * sizeof(Entry);
  }

  // The key's slot, or kNoSlot.
  uint32_t Find(uint64_t key) const {
    for (uint64_t i = Home(key);; i = (i + 1) & mask_) {
      const Entry& e = entries_[i];
      if (e.key == key) return e.slot;
      if (e.key == kEmptyKey) return kNoSlot;
    }
  }

  // Starts loading the cache line where Find(key) begins, for a batch that
  // looks keys up a few iterations after announcing them.
  void Prefetch(uint64_t key) const { __builtin_prefetch(&entries_[Home(key)]); }

  // REQUIRES: key absent, key != kEmptyKey, fewer than max_keys present.
  void Insert(uint64_t key, uint32_t slot) {
    uint64_t i = Home(key);
    while (entries_[i].key != kEmptyKey) i = (i + 1) & mask_;
    entries_[i] = {key, slot};
  }

  // The key's slot if present; otherwise inserts it with `slot` and returns
  // `slot`. REQUIRES: key != kEmptyKey, fewer than max_keys present.
  uint32_t FindOrInsert(uint64_t key, uint32_t slot) {
    for (uint64_t i = Home(key);; i = (i + 1) & mask_) {
      Entry& e = entries_[i];
      if (e.key == key) return e.slot;
      if (e.key == kEmptyKey) {
        e = {key, slot};
        return slot;
      }
    }
  }

  // Empties the index and makes room for max_keys keys, reusing its memory
  // unless it is too small or over 8x too large (so a steady stream of
  // similar batches allocates nothing, and one huge batch is not paid for
  // on every later small one).
  void Reset(uint64_t max_keys) {
    const uint64_t want = std::bit_ceil(std::max<uint64_t>(2 * max_keys, 2));
    if (want > entries_.size() || entries_.size() > 8 * want) {
      entries_.assign(want, Entry{});
    } else {
      std::fill(entries_.begin(), entries_.end(), Entry{});
    }
    mask_ = entries_.size() - 1;
  }

  // Removes key if present.
  void Erase(uint64_t key) {
    uint64_t i = Home(key);
    for (;; i = (i + 1) & mask_) {
      if (entries_[i].key == key) break;
      if (entries_[i].key == kEmptyKey) return;
    }
    // Backward shift: move later entries of the probe run into the hole
    // unless their home lies cyclically in (hole, j].
    for (uint64_t j = i;;) {
      j = (j + 1) & mask_;
      if (entries_[j].key == kEmptyKey) break;
      const uint64_t home = Home(entries_[j].key);
      const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
      if (stays) continue;
      entries_[i] = entries_[j];
      i = j;
    }
    entries_[i] = Entry{};
  }

  uint64_t capacity() const { return entries_.size(); }
  // Entry i of the table (i < capacity()): its key, kEmptyKey when none,
  // and *slot. For a walk over every key in table order (the hot tier's
  // scrubber), not for lookups.
  uint64_t KeyAt(uint64_t i, uint32_t* slot) const {
    *slot = entries_[i].slot;
    return entries_[i].key;
  }
  uint64_t memory_bytes() const { return entries_.size() * sizeof(Entry); }

  // A well-mixed 64-bit hash of a key (the splitmix64 finaliser).
  static uint64_t Mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }

 private:
  // 12 bytes, not 16: the index of a large pinned set is hundreds of MB.
#pragma pack(push, 4)
  struct Entry {
    uint64_t key = kEmptyKey;
    uint32_t slot = kNoSlot;
  };
#pragma pack(pop)
  static_assert(sizeof(Entry) == 12);

  static uint64_t CapacityFor(uint64_t max_keys) {
    return std::bit_ceil(std::max<uint64_t>(2 * max_keys, 2));
  }
  uint64_t Home(uint64_t key) const { return Mix(key) & mask_; }

  std::vector<Entry> entries_;
  uint64_t mask_;
};

}  // namespace engram

#endif  // ENGRAM_COMMON_UTIL_KEY_INDEX_H_
