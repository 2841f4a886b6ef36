#include "shard/hot_tier.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fast_mod.h"
#include "common/hot_profile.h"
#include "common/huge_buffer.h"
#include "common/key_index.h"
#include "common/prefetch_gather.h"
#include "common/status_macros.h"
#include "shard/admission_cache.h"

namespace engram {
namespace {

// Rows read from the store per ReadRows call while pinning.
constexpr size_t kLoadBatch = 4096;

class HotTierImpl final : public HotTier {
 public:
  // `dense`: the pinned keys are every row of `shard`, in key order, so a
  // row's slot is computed from its id instead of looked up.
  // `arena` holds pinned_rows * stride bytes.
  HotTierImpl(const ShardMap& map, uint32_t shard, uint64_t budget, uint32_t stride,
              uint64_t pinned_rows, bool dense, HugePageBuffer arena)
      : row_bytes_(map.row_bytes),
        budget_(budget),
        stride_(stride),
        dense_(dense),
        shard_div_(map.n_shards),
        shard_(shard),
        arena_(std::move(arena)),
        index_(dense ? 0 : pinned_rows),
        pinned_rows_(pinned_rows) {
    uint64_t first = 0;
    for (uint32_t l = 0; l < map.layer_rows.size(); ++l) {
      layer_first_slot_.push_back(first);
      layer_owned_.push_back(map.RowsOnShard(l, shard));
      first += layer_owned_.back();
    }
  }

  // Pins `keys` (in slot order), reading their rows from `store`.
  absl::Status Pin(RowStore& store, const std::vector<uint64_t>& keys) {
    std::vector<RowRef> refs;
    refs.reserve(std::min(keys.size(), kLoadBatch));
    for (size_t first = 0; first < keys.size(); first += kLoadBatch) {
      refs.clear();
      const size_t end = std::min(keys.size(), first + kLoadBatch);
      for (size_t i = first; i < end; ++i) {
        refs.push_back({ShardKeyLayer(keys[i]), ShardKeyRow(keys[i]), arena_.data() + i * stride_});
      }
      RETURN_IF_ERROR(store.ReadRows(refs));
      if (dense_) continue;
      for (size_t i = first; i < end; ++i) {
        index_.Insert(keys[i], static_cast<uint32_t>(i));
      }
    }
    return absl::OkStatus();
  }

  void StartCache(uint64_t cache_bytes) {
    AdmissionCacheOptions o;
    o.slots = cache_bytes / stride_;
    o.slot_bytes = stride_;
    if (o.slots > 0) cache_ = std::make_unique<AdmissionCache>(o);  // else none
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

 private:
  // The pinned copy of the row, or nullptr. REQUIRES: layer < layers.
  const uint8_t* PinnedRow(uint32_t layer, uint64_t row) const {
    if (dense_) {
      // One dependent cache miss per row (the row) instead of two (index
      // entry, then row): the gather of a hot request is memory-bound.
      uint64_t k, shard;
      shard_div_.DivMod(row, &k, &shard);
      if (shard != shard_ || k >= layer_owned_[layer]) return nullptr;
      return arena_.data() + (layer_first_slot_[layer] + k) * stride_;
    }
    if (pinned_rows_ == 0) return nullptr;
    const uint32_t slot = index_.Find(ShardKey(layer, row));
    if (slot == KeySlotIndex::kNoSlot) return nullptr;
    return arena_.data() + uint64_t{slot} * stride_;
  }

  const std::vector<uint32_t> row_bytes_;
  const uint64_t budget_;
  const uint32_t stride_;
  const bool dense_;
  const FastModulo shard_div_;  // by the shard count
  const uint32_t shard_;
  std::vector<uint64_t> layer_first_slot_;  // per layer, for dense_
  std::vector<uint64_t> layer_owned_;       // rows of each layer on the shard
  // Immutable after Build: lock-free reads.
  HugePageBuffer arena_;
  KeySlotIndex index_;
  const uint64_t pinned_rows_;
  std::unique_ptr<AdmissionCache> cache_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HotTier>> HotTier::Build(RowStore& store,
                                                        const HotTierOptions& options) {
  if (options.cache_share_percent > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("hot tier cache share ", options.cache_share_percent, "% is not in 0..100"));
  }
  const ShardMap& map = store.shard_map();
  const uint32_t shard = store.shard_index();
  const uint32_t stride = *std::max_element(map.row_bytes.begin(), map.row_bytes.end());
  uint64_t shard_rows = 0;
  for (uint32_t l = 0; l < map.layer_rows.size(); ++l) {
    shard_rows += map.RowsOnShard(l, shard);
  }
  const uint64_t budget = options.budget_bytes;

  // The keys to pin, in slot order.
  std::vector<uint64_t> keys;
  const bool whole_shard = budget > 0 && budget / stride >= shard_rows;
  if (whole_shard) {
    keys.reserve(shard_rows);
    for (uint32_t l = 0; l < map.layer_rows.size(); ++l) {
      for (uint64_t r = shard; r < map.layer_rows[l]; r += map.n_shards) {
        keys.push_back(ShardKey(l, r));
      }
    }
  } else if (budget > 0 && !options.profile_path.empty()) {
    ASSIGN_OR_RETURN(std::vector<HotProfileEntry> profile,
                     ReadHotProfile(options.profile_path, map, shard));
    const uint64_t pin_rows = (budget - budget * options.cache_share_percent / 100) / stride;
    const uint64_t skip = std::min<uint64_t>(options.skip_profile_bytes / stride, profile.size());
    keys.reserve(std::min<uint64_t>(pin_rows, profile.size() - skip));
    for (size_t i = skip; i < profile.size(); ++i) {
      if (keys.size() >= pin_rows) break;
      keys.push_back(ShardKey((profile)[i].layer, (profile)[i].row));
    }
  }
  ASSIGN_OR_RETURN(HugePageBuffer arena, HugePageBuffer::Allocate(keys.size() * uint64_t{stride}));
  auto tier = std::make_unique<HotTierImpl>(map, shard, budget, stride, keys.size(), whole_shard,
                                            std::move(arena));
  if (auto s = tier->Pin(store, keys); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("loading the hot tier: ", s.message()));
  }
  // With every row pinned nothing is ever admitted: give the cache no slots
  // rather than allocating budget the shard can never use.
  tier->StartCache(whole_shard ? 0 : budget - keys.size() * stride);
  return std::unique_ptr<HotTier>(std::move(tier));
}

}  // namespace engram
