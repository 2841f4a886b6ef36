#include "shard/admission_cache.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "absl/synchronization/mutex.h"
#include "common/util/key_index.h"

namespace engram {
namespace {

// Count-min sketch of access frequencies with 4 rows of saturating 4-bit
// counters (kept in bytes for simplicity); every `sample` increments all
// counters are halved, so the sketch follows the recent distribution.
class FrequencySketch {
 public:
  static uint64_t WidthFor(uint64_t slots) { return std::bit_ceil(std::max<uint64_t>(slots, 16)); }
  static uint64_t MemoryBytesFor(uint64_t slots) { return kRows * WidthFor(slots); }

  explicit FrequencySketch(uint64_t slots)
      : width_(WidthFor(slots)),
        counters_(kRows * width_, 0),
        sample_(10 * std::max<uint64_t>(slots, 16)) {}

  void Increment(uint64_t hash) {
    for (int r = 0; r < kRows; ++r) {
      uint8_t& c = counters_[r * width_ + Index(hash, r)];
      if (c < kMax) ++c;
    }
    if (++additions_ >= sample_) Age();
  }

  uint64_t memory_bytes() const { return counters_.capacity(); }

  uint32_t Estimate(uint64_t hash) const {
    uint32_t m = kMax;
    for (int r = 0; r < kRows; ++r) {
      m = std::min<uint32_t>(m, counters_[r * width_ + Index(hash, r)]);
    }
    return m;
  }

 private:
  static constexpr int kRows = 4;
  static constexpr uint8_t kMax = 15;

  uint64_t Index(uint64_t hash, int r) const {
    return KeySlotIndex::Mix(hash + 0x9e3779b97f4a7c15ull * (r + 1)) & (width_ - 1);
  }
  void Age() {
    for (uint8_t& c : counters_) c >>= 1;
    additions_ /= 2;
  }

  uint64_t width_;
  std::vector<uint8_t> counters_;
  uint64_t sample_;
  uint64_t additions_ = 0;
};

}  // namespace

class AdmissionCache::Shard {
 public:
  Shard(uint8_t* rows, uint64_t slots, uint32_t slot_bytes, AdmissionCacheOptions::Policy policy)
      : rows_(rows),
        slot_bytes_(slot_bytes),
        policy_(policy),
        keys_(slots, KeySlotIndex::kEmptyKey),
        referenced_(slots, 0),
        index_(slots),
        sketch_(slots) {}

  bool Lookup(uint64_t key, uint64_t hash, uint8_t* dst, uint32_t n) {
    absl::MutexLock lock(&mu_);
    sketch_.Increment(hash);
    const uint32_t slot = index_.Find(key);
    if (slot == KeySlotIndex::kNoSlot) return false;
    referenced_[slot] = 1;
    std::memcpy(dst, rows_ + uint64_t{slot} * slot_bytes_, n);
    return true;
  }

  uint64_t metadata_bytes() const {
    return keys_.capacity() * sizeof(uint64_t) + referenced_.capacity() + index_.memory_bytes() +
           sketch_.memory_bytes();
  }
  // metadata_bytes() of a shard of `slots` slots.
  static uint64_t MetadataBytesFor(uint64_t slots) {
    return slots * (sizeof(uint64_t) + 1) + KeySlotIndex::MemoryBytesFor(slots) +
           FrequencySketch::MemoryBytesFor(slots);
  }

  // Returns true if a new row became resident (no eviction).
  bool Admit(uint64_t key, uint64_t hash, const uint8_t* data, uint32_t n) {
    absl::MutexLock lock(&mu_);
    if (index_.Find(key) != KeySlotIndex::kNoSlot) return false;
    uint32_t slot;
    bool grew = false;
    if (used_ < keys_.size()) {
      slot = static_cast<uint32_t>(used_++);
      grew = true;
    } else {
      // CLOCK: clear reference bits until an unreferenced victim comes up.
      while (referenced_[hand_]) {
        referenced_[hand_] = 0;
        hand_ = hand_ + 1 == keys_.size() ? 0 : hand_ + 1;
      }
      slot = static_cast<uint32_t>(hand_);
      if (policy_ == AdmissionCacheOptions::Policy::kTinyLfu &&
          sketch_.Estimate(hash) <= sketch_.Estimate(KeySlotIndex::Mix(keys_[slot]))) {
        return false;  // the victim is at least as popular: keep it
      }
      index_.Erase(keys_[slot]);
      hand_ = hand_ + 1 == keys_.size() ? 0 : hand_ + 1;
    }
    keys_[slot] = key;
    referenced_[slot] = 0;
    index_.Insert(key, slot);
    std::memcpy(rows_ + uint64_t{slot} * slot_bytes_, data, n);
    return grew;
  }

 private:
  absl::Mutex mu_;
  uint8_t* const rows_;
  const uint32_t slot_bytes_;
  const AdmissionCacheOptions::Policy policy_;
  std::vector<uint64_t> keys_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> referenced_ ABSL_GUARDED_BY(mu_);
  KeySlotIndex index_ ABSL_GUARDED_BY(mu_);
  FrequencySketch sketch_ ABSL_GUARDED_BY(mu_);
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t hand_ ABSL_GUARDED_BY(mu_) = 0;
};

namespace {

// How many lock shards `slots` slots are split into: at least ~64 slots a
// shard, so CLOCK and the sketch have room to work.
uint64_t LockShards(uint64_t slots, int shards) {
  return std::clamp<uint64_t>(slots / 64, 1, static_cast<uint64_t>(std::max(1, shards)));
}

// Slots of lock shard i of n.
uint64_t SlotsOfShard(uint64_t slots, uint64_t n, uint64_t i) {
  return slots / n + (i < slots % n ? 1 : 0);
}

}  // namespace

uint64_t AdmissionCache::MetadataBytesFor(const AdmissionCacheOptions& options) {
  const uint64_t slots = options.slot_bytes == 0 ? 0 : options.slots;
  if (slots == 0) return 0;
  const uint64_t n_shards = LockShards(slots, options.shards);
  uint64_t bytes = 0;
  for (uint64_t i = 0; i < n_shards; ++i) {
    bytes += Shard::MetadataBytesFor(SlotsOfShard(slots, n_shards, i));
  }
  return bytes;
}

AdmissionCache::AdmissionCache(const AdmissionCacheOptions& options)
    : slots_(options.slot_bytes == 0 ? 0 : options.slots), slot_bytes_(options.slot_bytes) {
  if (slots_ == 0) return;
  const uint64_t n_shards = LockShards(slots_, options.shards);
  arena_.reset(new uint8_t[slots_ * slot_bytes_]);
  uint64_t first = 0;
  for (uint64_t i = 0; i < n_shards; ++i) {
    const uint64_t n = SlotsOfShard(slots_, n_shards, i);
    shards_.push_back(std::make_unique<Shard>(arena_.get() + first * slot_bytes_, n, slot_bytes_,
                                              options.policy));
    first += n;
  }
}

AdmissionCache::~AdmissionCache() = default;

AdmissionCache::Shard& AdmissionCache::ShardFor(uint64_t hash) {
  // The top bits choose the shard; the index probes with the low bits.
  return *shards_[(hash >> 32) % shards_.size()];
}

bool AdmissionCache::Lookup(uint64_t key, uint8_t* dst, uint32_t n) {
  if (shards_.empty()) return false;
  const uint64_t hash = KeySlotIndex::Mix(key);
  return ShardFor(hash).Lookup(key, hash, dst, n);
}

void AdmissionCache::Admit(uint64_t key, const uint8_t* data, uint32_t n) {
  if (shards_.empty()) return;
  const uint64_t hash = KeySlotIndex::Mix(key);
  if (ShardFor(hash).Admit(key, hash, data, n)) {
    resident_.fetch_add(1, std::memory_order_relaxed);
  }
}

uint64_t AdmissionCache::metadata_bytes() const {
  uint64_t n = 0;
  for (const std::unique_ptr<Shard>& shard : shards_) n += shard->metadata_bytes();
  return n;
}

}  // namespace engram
