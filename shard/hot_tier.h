// HotTier: the RAM tier of a shard server.
//
// Two parts share one byte budget: rows pinned from the hot-row profile
// (most frequent first) in one contiguous arena with an open-addressing
// index, and a frequency-based admission cache for the rest of the budget,
// fed with rows read from disk. Lookups never touch RocksDB and never
// allocate. See docs/architecture.md for the admission policy and its
// measured effect.
//
// Integrity: every pinned row gets a checksum when it is loaded (4 bytes a
// row; RowChecksum, seeded with its key), and the tier's Scrubber
// (shard/scrubber.h) re-checks the pinned rows and re-reads the store's at
// a bounded rate. A pinned row that fails its checksum is taken out of
// service at once (Lookups miss it and read it from the store) and pinned
// again from the store's copy when that still has the row's checksum. Rows
// the store cannot return while the tier loads are left unpinned (up to
// HotTierOptions::max_damaged_rows). Rows of the admission cache carry no
// checksum: they come from verified store reads and are evicted in time.
#ifndef ENGRAM_SHARD_HOT_TIER_H_
#define ENGRAM_SHARD_HOT_TIER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/format/hot_profile.h"
#include "common/format/shard_map.h"
#include "shard/row_store.h"
#include "shard/scrubber.h"

namespace engram {

// HotTierOptions::cache_share_percent's default, and the shard server's.
inline constexpr uint32_t kHotTierCacheSharePercent = 20;
// HotTierOptions::layer_pin_shares may sum to 1 plus this (rounding of
// shares written as percentages).
inline constexpr double kLayerShareSlack = 1e-9;

struct HotTierOptions {
  // The tier's RAM, in bytes: pinned rows with their checksums and index,
  // and the admission cache's slots and bookkeeping (HotTierPinnedBytes,
  // HotTierCacheBytes). 0 = no hot tier.
  uint64_t budget_bytes = 0;
  // Optional hot-row profile (written by `engramctl import --profile-trace`);
  // empty = no pinned rows, the whole budget is the admission cache. When the
  // budget covers the whole shard, every row is pinned regardless (and the
  // profile is not read). A named profile that cannot be read is an error.
  std::string profile_path;
  // This shard's share of the workers' caches (ClientOptions::
  // worker_cache_bytes): bytes of the profile's hottest rows the workers
  // hold themselves, so they are not pinned here: pinning starts after them,
  // and the two tiers add up instead of holding the same rows twice. 0 = pin
  // from the top.
  uint64_t worker_cache_bytes = 0;
  // With a profile, this share of the budget (percent, 0-100) stays with the
  // admission cache, for rows the profile did not foresee; the rest is
  // pinned, most frequent first. 0 = all of it pinned: no admission work on
  // a miss, and no adapting to traffic the profile missed (what each costs:
  // docs/benchmarks.md, "Settings chosen by measurement").
  uint32_t cache_share_percent = kHotTierCacheSharePercent;
  // Rows to pin that the store cannot return (DATA_LOSS) are left unpinned
  // (each is logged, and read from the store, failing again, when asked
  // for); more than this many fail Build with DATA_LOSS.
  uint64_t max_damaged_rows = 1024;
  // The scrubber's rates (0 = that walk off) and where it reports.
  ScrubberOptions scrub = {};
  // Where the pinned budget goes, by layer (window-aware placement; a
  // shard's tier_plan.json, shard/shard_format.h). Empty = by frequency:
  // the profile's order across layers. Else one share per layer, each in
  // [0, 1], summing to at most 1, of the rows the pinned budget holds:
  // layer l pins its own hottest profile rows (after the workers' head,
  // worker_cache_bytes) up to floor(share x rows), and when those run out
  // first, its rows the profile never saw (in row order, the workers' head
  // still left out), so a share that covers the layer holds all of it;
  // what is left (shares summing below 1, rounding, a share larger than
  // its layer) goes to the other rows in profile order. A first Engram
  // layer has one block to fetch its tail, a later one many: a larger
  // share for the first keeps its rows off the disk.
  std::vector<double> layer_pin_shares = {};

  // InvalidArgument naming the field: cache_share_percent over 100;
  // layer_pin_shares not empty and not one share per layer of `n_layers`,
  // a share outside [0, 1], or shares summing over 1.
  absl::Status Validate(size_t n_layers) const;
};

// What a budget buys on one shard: the rows HotTier::Build pins and the
// admission cache's slots. A pure function of its inputs, shared by Build
// and the capacity planner (`engramctl plan`), so a plan replays exactly
// the policy a shard runs.
struct HotTierPlan {
  bool whole_shard = false;           // every row pinned (no cache, no tail reads)
  uint32_t stride = 0;                // bytes of one row slot (the largest row)
  std::vector<uint64_t> pinned_keys;  // ShardKey(layer, row), in slot order
  uint64_t cache_slots = 0;           // rows the admission cache holds
  uint64_t bytes = 0;                 // RAM of the above (at most the budget)
};
// RAM of `rows` pinned rows of `stride` bytes: the rows, a 4-byte checksum
// and an out-of-service bit each, and (unless the whole shard is pinned, in
// key order) the index of 24-48 bytes a row.
uint64_t HotTierPinnedBytes(uint64_t rows, uint32_t stride, bool whole_shard);
// RAM of an admission cache of `slots` rows: the slots and their
// bookkeeping (AdmissionCache::MetadataBytesFor).
uint64_t HotTierCacheBytes(uint64_t slots, uint32_t stride);
// The budget that pins every row of `shard` (HotTierPinnedBytes of all of
// them, in key order).
uint64_t HotTierWholeShardBytes(const ShardMap& map, uint32_t shard);
// True when `budget_bytes` is at least HotTierWholeShardBytes (then no
// profile is needed).
bool HotTierHoldsWholeShard(const ShardMap& map, uint32_t shard, uint64_t budget_bytes);
// The plan for `options` (budget, worker_cache_bytes, cache_share_percent,
// layer_pin_shares; its profile_path is not read: `profile` is the
// profile's entries, in file order, or null for none). InvalidArgument for
// options that fail Validate.
absl::StatusOr<HotTierPlan> PlanHotTier(const ShardMap& map, uint32_t shard,
                                        const HotTierOptions& options,
                                        const std::vector<HotProfileEntry>* profile);

enum class HotResult { kMiss, kPinned, kCached };

// Rows a LookupBatch found resident, by part of the tier.
struct HotBatchResult {
  uint64_t pinned = 0;
  uint64_t cached = 0;
};

// Thread-safe: Lookup and Admit may be called concurrently from any thread.
class HotTier {
 public:
  // Loads pinned rows from `store` (batched ReadRows; for a full-shard
  // budget every row in key order), then starts the scrubber. REQUIRES:
  // store outlives the tier.
  static absl::StatusOr<std::unique_ptr<HotTier>> Build(RowStore& store,
                                                        const HotTierOptions& options);
  virtual ~HotTier() = default;

  // Copies the row into dst (row_bytes of its layer) when resident.
  virtual HotResult Lookup(uint32_t layer, uint64_t row, uint8_t* dst) = 0;
  // Lookup of many rows of one layer: row i, when resident, is copied to
  // dst + i * row_bytes(layer); the index i of every other row is appended
  // to *misses, in order (and dst there is left as it was). Rows are
  // prefetched a few ahead of the copy, so a large hot request is gathered
  // at memory bandwidth rather than one cache miss at a time.
  virtual HotBatchResult LookupBatch(uint32_t layer, std::span<const uint64_t> rows, uint8_t* dst,
                                     std::vector<uint32_t>* misses) = 0;
  // Offers a row just read from disk to the admission cache.
  virtual void Admit(uint32_t layer, uint64_t row, const uint8_t* data) = 0;

  // RAM in use: pinned rows (fixed after Build), resident cached rows.
  virtual uint64_t pinned_bytes() const = 0;
  virtual uint64_t cached_bytes() const = 0;
  virtual uint64_t budget_bytes() const = 0;
  // RAM beside the rows: the pinned rows' index, checksums and
  // out-of-service bits, and the admission cache's bookkeeping (fixed after
  // Build; pinned_bytes + cache capacity + index_bytes is the plan's bytes).
  virtual uint64_t index_bytes() const = 0;

  // Integrity counters for metrics (name -> value): the scrubber's
  // cumulative scrub_pinned_rows, scrub_pinned_failures,
  // scrub_pinned_repaired, scrub_pinned_passes, scrub_disk_rows,
  // scrub_disk_failures, scrub_layer_mismatches, scrub_disk_passes
  // (ScrubStats); hot_damaged_at_load (rows left unpinned by Build) and
  // hot_quarantined_rows (pinned rows out of service now).
  virtual std::vector<std::pair<std::string, double>> Stats() const = 0;
  // One complete scrub pass now, on the calling thread (Scrubber::RunPass).
  virtual ScrubStats ScrubNow() = 0;
  // Test hook: the pinned copy of a row, writable, or null when the row is
  // not pinned. Writing it is what a RAM fault does.
  virtual uint8_t* PinnedRowForTesting(uint32_t layer, uint64_t row) = 0;
};

}  // namespace engram

#endif  // ENGRAM_SHARD_HOT_TIER_H_
