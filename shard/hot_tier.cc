#include "shard/hot_tier.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/format/hot_profile.h"
#include "common/hash/fast_mod.h"
#include "common/util/huge_buffer.h"
#include "common/util/key_index.h"
#include "common/util/log.h"
#include "common/util/prefetch_gather.h"
#include "common/util/status_macros.h"
#include "shard/admission_cache.h"

namespace engram {
namespace {

// Rows read from the store per ReadRows call while pinning.
constexpr size_t kLoadBatch = 4096;

class HotTierImpl final : public HotTier, private PinnedRowScrub {
 public:
  // `dense`: the pinned keys are every row of `shard`, in key order, so a
  // row's slot is computed from its id instead of looked up.
  // `arena` holds pinned_rows * stride bytes.
  HotTierImpl(RowStore& store, const HotTierOptions& options, uint64_t budget, uint32_t stride,
              uint64_t pinned_rows, bool dense, HugePageBuffer arena)
      : store_(store),
        options_(options),
        row_bytes_(store.shard_map().row_bytes),
        budget_(budget),
        stride_(stride),
        dense_(dense),
        n_shards_(store.shard_map().n_shards),
        shard_div_(n_shards_),
        shard_(store.shard_index()),
        arena_(std::move(arena)),
        index_(dense ? 0 : pinned_rows),
        pinned_rows_(pinned_rows),
        sums_(pinned_rows),
        out_bits_(new std::atomic<uint64_t>[(pinned_rows + 63) / 64]()) {
    const ShardMap& map = store.shard_map();
    uint64_t first = 0;
    for (uint32_t l = 0; l < map.layer_rows.size(); ++l) {
      layer_first_slot_.push_back(first);
      layer_owned_.push_back(map.RowsOnShard(l, shard_));
      first += layer_owned_.back();
    }
  }

  ~HotTierImpl() override { scrubber_.reset(); }  // its thread calls ScrubPinned

  // Pins `keys` (in slot order), reading their rows from the store, and
  // gives each its checksum. Rows the store cannot return are left out of
  // service, up to options_.max_damaged_rows. The keys' pages go back to
  // the kernel as they are pinned (ReleaseConsumedPages), so the start's
  // peak is the arena, not the arena and the keys (8 bytes a row, a tenth
  // of an 84-byte Q2_K row, beside the budget). REQUIRES: `keys` is not
  // read afterwards.
  absl::Status Pin(std::vector<uint64_t>& keys) {
    std::vector<RowRef> refs;
    refs.reserve(std::min(keys.size(), kLoadBatch));
    for (size_t first = 0; first < keys.size(); first += kLoadBatch) {
      refs.clear();
      const size_t end = std::min(keys.size(), first + kLoadBatch);
      for (size_t i = first; i < end; ++i) {
        refs.push_back({ShardKeyLayer(keys[i]), ShardKeyRow(keys[i]), arena_.data() + i * stride_});
      }
      if (absl::Status s = store_.ReadRows(refs); !s.ok()) {
        if (!absl::IsDataLoss(s)) return s;
        RETURN_IF_ERROR(PinRowByRow(keys, first, refs));
      }
      for (size_t i = first; i < end; ++i) {
        const uint32_t slot = static_cast<uint32_t>(i);
        if (unknown_sum_.empty() || !unknown_sum_.contains(slot)) {
          sums_[i] = RowChecksum(keys[i], refs[i - first].dst, row_bytes_[refs[i - first].layer]);
        }
        if (!dense_) index_.Insert(keys[i], slot);
      }
      ReleaseConsumedPages(keys.data(), keys.size() * sizeof(uint64_t), end * sizeof(uint64_t));
    }
    return absl::OkStatus();
  }

  void StartCache(uint64_t slots) {
    AdmissionCacheOptions o;
    o.slots = slots;
    o.slot_bytes = stride_;
    if (o.slots > 0) cache_ = std::make_unique<AdmissionCache>(o);  // else none
  }

  void StartScrubber() {
    PinnedRowScrub* pinned = pinned_rows_ > 0 ? this : nullptr;
    scrubber_ = std::make_unique<Scrubber>(store_, pinned, options_.scrub);
  }

  HotResult Lookup(uint32_t layer, uint64_t row, uint8_t* dst) override {
    if (layer >= row_bytes_.size()) return HotResult::kMiss;
    const uint32_t n = row_bytes_[layer];
    if (const uint8_t* src = PinnedRow(layer, row); src != nullptr) {
      std::memcpy(dst, src, n);
      return HotResult::kPinned;
    }
    if (cache_ != nullptr && cache_->Lookup(ShardKey(layer, row), dst, n)) {
      return HotResult::kCached;
    }
    return HotResult::kMiss;
  }

  HotBatchResult LookupBatch(uint32_t layer, std::span<const uint64_t> rows, uint8_t* dst,
                             std::vector<uint32_t>* misses) override {
    HotBatchResult result;
    if (layer >= row_bytes_.size()) {
      for (size_t i = 0; i < rows.size(); ++i) misses->push_back(static_cast<uint32_t>(i));
      return result;
    }
    const uint32_t n = row_bytes_[layer];
    const bool indexed = !dense_ && pinned_rows_ > 0;
    const size_t misses_before = misses->size();
    PrefetchGather(
        rows.size(), n, dst,
        [&](size_t i) {
          if (indexed) index_.Prefetch(ShardKey(layer, rows[i]));
        },
        [&](size_t i) { return PinnedRow(layer, rows[i]); },
        [&](size_t i, uint8_t* out) {
          if (cache_ != nullptr && cache_->Lookup(ShardKey(layer, rows[i]), out, n)) {
            ++result.cached;
          } else {
            misses->push_back(static_cast<uint32_t>(i));
          }
        });
    result.pinned = rows.size() - result.cached - (misses->size() - misses_before);
    return result;
  }

  void Admit(uint32_t layer, uint64_t row, const uint8_t* data) override {
    if (cache_ == nullptr || layer >= row_bytes_.size()) return;
    cache_->Admit(ShardKey(layer, row), data, row_bytes_[layer]);
  }

  uint64_t pinned_bytes() const override { return pinned_rows_ * stride_; }
  uint64_t cached_bytes() const override {
    return cache_ == nullptr ? 0 : cache_->resident_bytes();
  }
  uint64_t budget_bytes() const override { return budget_; }
  uint64_t index_bytes() const override {
    return index_.memory_bytes() + sums_.capacity() * sizeof(uint32_t) +
           (pinned_rows_ + 63) / 64 * 8 + (cache_ == nullptr ? 0 : cache_->metadata_bytes());
  }

  std::vector<std::pair<std::string, double>> Stats() const override {
    const ScrubStats s = scrubber_->stats();
    auto d = [](uint64_t v) { return static_cast<double>(v); };
    return {{"scrub_pinned_rows", d(s.pinned_rows)},
            {"scrub_pinned_failures", d(s.pinned_failures)},
            {"scrub_pinned_repaired", d(s.pinned_repaired)},
            {"scrub_pinned_passes", d(s.pinned_passes)},
            {"scrub_disk_rows", d(s.disk_rows)},
            {"scrub_disk_failures", d(s.disk_failures)},
            {"scrub_layer_mismatches", d(s.layer_mismatches)},
            {"scrub_disk_passes", d(s.disk_passes)},
            {"hot_damaged_at_load", d(damaged_at_load_)},
            {"hot_quarantined_rows", d(out_count_.load(std::memory_order_relaxed))}};
  }

  ScrubStats ScrubNow() override { return scrubber_->RunPass(); }

  uint8_t* PinnedRowForTesting(uint32_t layer, uint64_t row) override {
    if (layer >= row_bytes_.size()) return nullptr;
    const uint64_t slot = SlotOf(layer, row);
    return slot == kNoSlot ? nullptr : arena_.data() + slot * stride_;
  }

 private:
  static constexpr uint64_t kNoSlot = ~uint64_t{0};

  // The pinned copy of the row, or nullptr (not pinned, or out of
  // service). REQUIRES: layer < layers.
  const uint8_t* PinnedRow(uint32_t layer, uint64_t row) const {
    const uint64_t slot = SlotOf(layer, row);
    if (slot == kNoSlot || OutOfService(slot)) return nullptr;
    return arena_.data() + slot * stride_;
  }
  // The row's slot, or kNoSlot. REQUIRES: layer < layers.
  uint64_t SlotOf(uint32_t layer, uint64_t row) const {
    if (dense_) {
      // One dependent cache miss per row (the row) instead of two (index
      // entry, then row): the gather of a hot request is memory-bound.
      uint64_t k, shard;
      shard_div_.DivMod(row, &k, &shard);
      if (shard != shard_ || k >= layer_owned_[layer]) return kNoSlot;
      return layer_first_slot_[layer] + k;
    }
    if (pinned_rows_ == 0) return kNoSlot;
    const uint32_t slot = index_.Find(ShardKey(layer, row));
    return slot == KeySlotIndex::kNoSlot ? kNoSlot : slot;
  }

  // Out-of-service slots: one bit each, and their count, which a Lookup
  // reads first: one load of a line that stays in cache, so a sound tier
  // pays nothing more (a 12,288-row gather: within the noise). Only while
  // rows are out (a RAM fault is repaired at once; rows whose store copy is
  // damaged too stay out until the shard is re-imported) does each pinned
  // row cost a load of its bit too (up to ~20% a row in a micro-benchmark
  // on this VM). A slot's bit is set before the count rises, and cleared
  // (after its row was rewritten) before it falls. Both only ever on one
  // thread at a time (Build, then the scrubber).
  bool OutOfService(uint64_t slot) const {
    if (out_count_.load(std::memory_order_acquire) == 0) [[likely]] {
      return false;
    }
    return (out_bits_[slot >> 6].load(std::memory_order_acquire) >> (slot & 63)) & 1;
  }
  void TakeOut(uint64_t slot) {
    const uint64_t bit = uint64_t{1} << (slot & 63);
    if ((out_bits_[slot >> 6].fetch_or(bit, std::memory_order_acq_rel) & bit) == 0) {
      out_count_.fetch_add(1, std::memory_order_acq_rel);
    }
  }
  void PutBack(uint64_t slot) {
    const uint64_t bit = uint64_t{1} << (slot & 63);
    if ((out_bits_[slot >> 6].fetch_and(~bit, std::memory_order_acq_rel) & bit) != 0) {
      out_count_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  void Log(const std::string& line) const {
    if (options_.scrub.report) {
      options_.scrub.report(line);
    } else {
      LogLine('E', line);
    }
  }
  std::string RowName(uint64_t key) const {
    return absl::StrCat("shard ", shard_, " (", store_.shard_dir(), "): layer ", ShardKeyLayer(key),
                        " row ", ShardKeyRow(key));
  }

  // A batch of Pin whose read failed: each row again, alone; those that
  // fail stay out of service.
  absl::Status PinRowByRow(const std::vector<uint64_t>& keys, size_t first,
                           std::span<const RowRef> refs);

  // PinnedRowScrub.
  uint64_t scrub_positions() const override { return dense_ ? pinned_rows_ : index_.capacity(); }
  Step ScrubPinned(uint64_t begin, uint64_t max_rows, ScrubStats* stats,
                   const Report& report) override;
  // Reads the row at `slot` from the store and pins it again if the copy
  // has the row's checksum (or the row had none: it failed to load).
  bool Repin(uint64_t key, uint64_t slot, const PinnedRowScrub::Report& report);

  RowStore& store_;
  const HotTierOptions options_;
  const std::vector<uint32_t> row_bytes_;
  const uint64_t budget_;
  const uint32_t stride_;
  const bool dense_;
  const uint32_t n_shards_;
  const FastModulo shard_div_;  // by the shard count
  const uint32_t shard_;
  std::vector<uint64_t> layer_first_slot_;  // per layer, for dense_
  std::vector<uint64_t> layer_owned_;       // rows of each layer on the shard
  // Immutable after Build (but for rows re-pinned while out of service):
  // lock-free reads.
  HugePageBuffer arena_;
  KeySlotIndex index_;
  const uint64_t pinned_rows_;
  std::unique_ptr<AdmissionCache> cache_;
  // Integrity: each slot's RowChecksum, set at load and by Repin (both only
  // ever on one thread at a time: Build, then the scrubber's walk).
  std::vector<uint32_t> sums_;
  absl::flat_hash_set<uint32_t> unknown_sum_;  // slots that failed to load
  uint64_t damaged_at_load_ = 0;
  std::unique_ptr<std::atomic<uint64_t>[]> out_bits_;
  std::atomic<uint64_t> out_count_{0};
  std::unique_ptr<Scrubber> scrubber_;  // last: its thread uses the above
};

absl::Status HotTierImpl::PinRowByRow(const std::vector<uint64_t>& keys, size_t first,
                                      std::span<const RowRef> refs) {
  for (size_t i = 0; i < refs.size(); ++i) {
    const absl::Status s = store_.ReadRows(refs.subspan(i, 1));
    if (s.ok()) continue;
    if (!absl::IsDataLoss(s)) return s;
    const uint32_t slot = static_cast<uint32_t>(first + i);
    TakeOut(slot);
    unknown_sum_.insert(slot);
    if (++damaged_at_load_ > options_.max_damaged_rows) {
      return absl::DataLossError(
          absl::StrCat("more than ", options_.max_damaged_rows,
                       " rows to pin cannot be read (max_damaged_rows); the last: ", s.message()));
    }
    Log(absl::StrCat("hot tier: ", RowName(keys[first + i]),
                     " is not pinned, the store cannot return it: ", s.message()));
  }
  return absl::OkStatus();
}

PinnedRowScrub::Step HotTierImpl::ScrubPinned(uint64_t begin, uint64_t max_rows, ScrubStats* stats,
                                              const Report& report) {
  Step step;
  const uint64_t end = scrub_positions();
  uint64_t pos = begin;
  for (uint64_t rows = 0; pos < end && rows < max_rows; ++pos) {
    uint64_t key, slot;
    if (dense_) {
      slot = pos;
      const uint32_t layer = static_cast<uint32_t>(
          std::upper_bound(layer_first_slot_.begin(), layer_first_slot_.end(), slot) -
          layer_first_slot_.begin() - 1);
      key = ShardKey(layer, shard_ + (slot - layer_first_slot_[layer]) * n_shards_);
    } else {
      uint32_t s32;
      key = index_.KeyAt(pos, &s32);
      if (key == KeySlotIndex::kEmptyKey) continue;
      slot = s32;
    }
    ++rows;
    if (OutOfService(slot)) {  // taken out earlier: try again
      if (Repin(key, slot, report)) ++stats->pinned_repaired;
      continue;
    }
    const uint32_t rb = row_bytes_[ShardKeyLayer(key)];
    ++stats->pinned_rows;
    step.bytes += rb;
    if (RowChecksum(key, arena_.data() + slot * stride_, rb) == sums_[slot]) [[likely]] {
      continue;
    }
    ++stats->pinned_failures;
    TakeOut(slot);
    report(absl::StrCat("scrub: ", RowName(key),
                        ": its pinned copy in RAM fails its checksum; no longer served from RAM"));
    if (Repin(key, slot, report)) ++stats->pinned_repaired;
  }
  step.next = pos;
  return step;
}

bool HotTierImpl::Repin(uint64_t key, uint64_t slot, const PinnedRowScrub::Report& report) {
  const uint32_t layer = ShardKeyLayer(key);
  const uint32_t rb = row_bytes_[layer];
  std::vector<uint8_t> row(rb);
  const RowRef ref{layer, ShardKeyRow(key), row.data()};
  if (!store_.ReadRows({&ref, 1}).ok()) return false;  // the disk walk reports it
  const uint32_t sum = RowChecksum(key, row.data(), rb);
  const auto unknown = unknown_sum_.find(static_cast<uint32_t>(slot));
  if (unknown == unknown_sum_.end() && sum != sums_[slot]) {
    report(absl::StrCat("scrub: ", RowName(key),
                        ": the store's copy differs from the row pinned at start; left to the "
                        "store"));
    return false;
  }
  // Out of service, so no Lookup copies the slot while it is rewritten.
  std::memcpy(arena_.data() + slot * stride_, row.data(), rb);
  sums_[slot] = sum;
  if (unknown != unknown_sum_.end()) unknown_sum_.erase(unknown);
  PutBack(slot);
  report(absl::StrCat("scrub: ", RowName(key), ": pinned again from the store's copy"));
  return true;
}

}  // namespace

namespace {

uint32_t Stride(const ShardMap& map) {
  return *std::max_element(map.row_bytes.begin(), map.row_bytes.end());
}

uint64_t ShardRows(const ShardMap& map, uint32_t shard) {
  uint64_t rows = 0;
  for (uint32_t l = 0; l < map.layer_rows.size(); ++l) rows += map.RowsOnShard(l, shard);
  return rows;
}

}  // namespace

uint64_t HotTierPinnedBytes(uint64_t rows, uint32_t stride, bool whole_shard) {
  // The rows, a checksum each, an out-of-service bit each (in 64-bit words),
  // and unless the whole shard is pinned (slots in key order) the index
  // (an empty one otherwise).
  const uint64_t bytes = rows * (uint64_t{stride} + sizeof(uint32_t)) + (rows + 63) / 64 * 8;
  return bytes + KeySlotIndex::MemoryBytesFor(whole_shard ? 0 : rows);
}

uint64_t HotTierCacheBytes(uint64_t slots, uint32_t stride) {
  AdmissionCacheOptions o;
  o.slots = slots;
  o.slot_bytes = stride;
  return slots * stride + AdmissionCache::MetadataBytesFor(o);
}

namespace {

// The largest n <= limit with cost(n) <= budget; cost is non-decreasing.
template <typename Cost>
uint64_t MostThatFit(uint64_t limit, uint64_t budget, Cost cost) {
  uint64_t lo = 0, hi = limit;  // cost(lo) <= budget
  if (cost(0) > budget) return 0;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    if (cost(mid) <= budget) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace

uint64_t HotTierWholeShardBytes(const ShardMap& map, uint32_t shard) {
  return HotTierPinnedBytes(ShardRows(map, shard), Stride(map), /*whole_shard=*/true);
}

bool HotTierHoldsWholeShard(const ShardMap& map, uint32_t shard, uint64_t budget_bytes) {
  return budget_bytes > 0 && HotTierWholeShardBytes(map, shard) <= budget_bytes;
}

absl::Status HotTierOptions::Validate(size_t n_layers) const {
  if (cache_share_percent > 100) {
    return absl::InvalidArgumentError(absl::StrCat("hot tier cache share ", cache_share_percent,
                                                   "% is not in 0..100 (cache_share_percent)"));
  }
  if (layer_pin_shares.empty()) return absl::OkStatus();
  if (layer_pin_shares.size() != n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("layer_pin_shares has ", layer_pin_shares.size(),
                                                   " shares; the table has ", n_layers,
                                                   " Engram layers (one share each, or none)"));
  }
  double sum = 0;
  for (size_t l = 0; l < layer_pin_shares.size(); ++l) {
    const double v = layer_pin_shares[l];
    if (!(v >= 0 && v <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer_pin_shares[", l, "] = ", v, " is not in [0, 1]"));
    }
    sum += v;
  }
  if (sum > 1 + kLayerShareSlack) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer_pin_shares sum to ", sum, ", over 1 (shares of the pinned budget)"));
  }
  return absl::OkStatus();
}

namespace {

// The pinned keys of `layer_pin_shares` (HotTierOptions), at most `rows`:
// each layer its own hottest profile entries from `skip` on up to its
// share, then, when those run out first, its rows the profile never saw
// (in row order), then the rest of the profile in order.
void PinByLayerShares(const ShardMap& map, uint32_t shard,
                      const std::vector<HotProfileEntry>& profile, uint64_t skip, uint64_t rows,
                      const std::vector<double>& shares, std::vector<uint64_t>* keys) {
  std::vector<uint64_t> quota(shares.size());
  uint64_t quotas = 0;
  for (size_t l = 0; l < shares.size(); ++l) {
    quota[l] = std::min<uint64_t>(
        rows - quotas,
        static_cast<uint64_t>(std::floor(shares[l] * static_cast<double>(rows) + 1e-9)));
    quotas += quota[l];
  }
  std::vector<bool> taken(profile.size() - skip, false);
  for (size_t i = skip; i < profile.size(); ++i) {
    const uint32_t l = profile[i].layer;
    if (l < quota.size() && quota[l] > 0) {
      --quota[l];
      taken[i - skip] = true;
      keys->push_back(ShardKey(l, profile[i].row));
    }
  }
  for (uint32_t l = 0; l < quota.size(); ++l) {
    if (quota[l] == 0) continue;
    absl::flat_hash_set<uint64_t> profiled;  // the workers' head included
    for (const HotProfileEntry& e : profile) {
      if (e.layer == l) profiled.insert(e.row);
    }
    for (uint64_t r = shard; r < map.layer_rows[l] && quota[l] > 0; r += map.n_shards) {
      if (profiled.contains(r)) continue;
      keys->push_back(ShardKey(l, r));
      --quota[l];
    }
  }
  for (size_t i = skip; i < profile.size() && keys->size() < rows; ++i) {
    if (!taken[i - skip]) keys->push_back(ShardKey(profile[i].layer, profile[i].row));
  }
}

}  // namespace

absl::StatusOr<HotTierPlan> PlanHotTier(const ShardMap& map, uint32_t shard,
                                        const HotTierOptions& options,
                                        const std::vector<HotProfileEntry>* profile) {
  RETURN_IF_ERROR(options.Validate(map.layer_rows.size()));
  HotTierPlan plan;
  plan.stride = Stride(map);
  const uint32_t stride = plan.stride;
  const uint64_t budget = options.budget_bytes;
  std::vector<uint64_t>& keys = plan.pinned_keys;
  plan.whole_shard = HotTierHoldsWholeShard(map, shard, budget);
  if (plan.whole_shard) {
    keys.reserve(ShardRows(map, shard));
    for (uint32_t l = 0; l < map.layer_rows.size(); ++l) {
      for (uint64_t r = shard; r < map.layer_rows[l]; r += map.n_shards) {
        keys.push_back(ShardKey(l, r));
      }
    }
    plan.bytes = HotTierPinnedBytes(keys.size(), stride, true);
    return plan;  // nothing is ever admitted: no cache
  }
  if (budget > 0 && profile != nullptr) {
    const uint64_t pin_budget = budget - budget * options.cache_share_percent / 100;
    const uint64_t skip = std::min<uint64_t>(options.worker_cache_bytes / stride, profile->size());
    // By layer shares a layer's share may reach past its profile rows.
    const uint64_t most = options.layer_pin_shares.empty()
                              ? std::min<uint64_t>(profile->size() - skip, pin_budget / stride)
                              : std::min<uint64_t>(ShardRows(map, shard), pin_budget / stride);
    const uint64_t pin_rows = MostThatFit(
        most, pin_budget, [&](uint64_t n) { return HotTierPinnedBytes(n, stride, false); });
    keys.reserve(pin_rows);
    if (options.layer_pin_shares.empty()) {
      for (size_t i = skip; i < profile->size() && keys.size() < pin_rows; ++i) {
        keys.push_back(ShardKey((*profile)[i].layer, (*profile)[i].row));
      }
    } else {
      PinByLayerShares(map, shard, *profile, skip, pin_rows, options.layer_pin_shares, &keys);
    }
  }
  const uint64_t pinned = keys.empty() ? 0 : HotTierPinnedBytes(keys.size(), stride, false);
  const uint64_t rest = budget > pinned ? budget - pinned : 0;
  plan.cache_slots = MostThatFit(
      rest / stride, rest, [&](uint64_t n) { return n == 0 ? 0 : HotTierCacheBytes(n, stride); });
  plan.bytes = pinned + (plan.cache_slots == 0 ? 0 : HotTierCacheBytes(plan.cache_slots, stride));
  return plan;
}

absl::StatusOr<std::unique_ptr<HotTier>> HotTier::Build(RowStore& store,
                                                        const HotTierOptions& options) {
  const ShardMap& map = store.shard_map();
  const uint32_t shard = store.shard_index();
  const uint64_t budget = options.budget_bytes;
  std::vector<HotProfileEntry> profile;
  const bool use_profile =
      budget > 0 && !options.profile_path.empty() && !HotTierHoldsWholeShard(map, shard, budget);
  if (use_profile) {
    // By frequency, PlanHotTier uses at most the entries the worker caches
    // hold and the pinned budget's rows after them: the rest of the file is
    // only checked. By layer shares a layer's rows can lie anywhere in the
    // file: every entry is kept (24 bytes each, until the plan is made).
    const uint64_t stride = Stride(map);
    const uint64_t used = options.layer_pin_shares.empty()
                              ? options.worker_cache_bytes / stride + budget / stride + 1
                              : std::numeric_limits<uint64_t>::max();
    ASSIGN_OR_RETURN(profile, ReadHotProfile(options.profile_path, map, shard, used));
  }
  ASSIGN_OR_RETURN(HotTierPlan plan,
                   PlanHotTier(map, shard, options, use_profile ? &profile : nullptr));
  // The plan holds the keys to pin: the profile is returned before the
  // arena is mapped, so the start's peak is the arena and the keys (a
  // profile kept alive beside an arena of 295 MB took a shard capped at its
  // budget + 64 MiB past its limit).
  std::vector<HotProfileEntry>().swap(profile);
  const uint32_t stride = plan.stride;
  const bool whole_shard = plan.whole_shard;
  std::vector<uint64_t>& keys = plan.pinned_keys;
  ASSIGN_OR_RETURN(HugePageBuffer arena, HugePageBuffer::Allocate(keys.size() * uint64_t{stride}));
  auto tier = std::make_unique<HotTierImpl>(store, options, budget, stride, keys.size(),
                                            whole_shard, std::move(arena));
  if (auto s = tier->Pin(keys); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("loading the hot tier: ", s.message()));
  }
  std::vector<uint64_t>().swap(keys);  // released as pinned: nothing to read
  tier->StartCache(plan.cache_slots);
  tier->StartScrubber();
  return std::unique_ptr<HotTier>(std::move(tier));
}

}  // namespace engram
