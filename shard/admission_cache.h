// AdmissionCache: the dynamic part of the hot tier. A fixed number of
// fixed-size row slots in one preallocated arena, split into independently
// locked shards; eviction by CLOCK, admission by TinyLFU (a small count-min
// sketch of recent access frequency per shard: a new row replaces the CLOCK
// victim only if it has been asked for more often). See "## Hot tier" in
// docs/architecture.md for the choice and its measured hit ratios.
//
// Thread-safe; Lookup and Admit never allocate.
#ifndef ENGRAM_SHARD_ADMISSION_CACHE_H_
#define ENGRAM_SHARD_ADMISSION_CACHE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace engram {

struct AdmissionCacheOptions {
  uint64_t slots = 0;       // rows the cache holds; 0 = disabled
  uint32_t slot_bytes = 0;  // bytes per slot (>= every row's size)
  int shards = 32;          // lock shards (fewer if there are few slots)
  enum class Policy {
    kTinyLfu,  // CLOCK eviction, TinyLFU admission (the default)
    kClock,    // CLOCK eviction, admit everything (for comparison)
  };
  Policy policy = Policy::kTinyLfu;
};

class AdmissionCache {
 public:
  explicit AdmissionCache(const AdmissionCacheOptions& options);
  ~AdmissionCache();
  AdmissionCache(const AdmissionCache&) = delete;
  AdmissionCache& operator=(const AdmissionCache&) = delete;

  // Records an access to `key`; if resident copies n bytes into dst and
  // returns true. REQUIRES: key != ~0, n <= slot_bytes.
  bool Lookup(uint64_t key, uint8_t* dst, uint32_t n);
  // Offers a row just read elsewhere; it may be dropped by admission.
  void Admit(uint64_t key, const uint8_t* data, uint32_t n);

  uint64_t slots() const { return slots_; }
  uint64_t resident() const { return resident_.load(std::memory_order_relaxed); }
  uint64_t capacity_bytes() const { return slots_ * slot_bytes_; }
  uint64_t resident_bytes() const { return resident() * slot_bytes_; }
  // Bytes of the cache's bookkeeping beside its rows: per slot its key,
  // reference bit and index entries, and the frequency sketch (allocated,
  // fixed at construction).
  uint64_t metadata_bytes() const;
  // metadata_bytes() of a cache made with `options`, without making it (for
  // sizing a budget: PlanHotTier).
  static uint64_t MetadataBytesFor(const AdmissionCacheOptions& options);

 private:
  class Shard;
  Shard& ShardFor(uint64_t hash);

  uint64_t slots_;
  uint32_t slot_bytes_;
  std::unique_ptr<uint8_t[]> arena_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<uint64_t> resident_{0};
};

}  // namespace engram

#endif  // ENGRAM_SHARD_ADMISSION_CACHE_H_
