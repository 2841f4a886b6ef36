#include "shard/plan/tier_replay.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/format/token_trace.h"
#include "common/hash/engram_hash.h"
#include "common/util/key_index.h"
#include "common/util/status_macros.h"
#include "shard/admission_cache.h"
#include "shard/import/importer.h"

namespace engram {
namespace {

// Bookkeeping bytes of one admission cache slot replayed with 1-byte rows:
// the slot, its key and reference bit, 2-4 index entries of 12 bytes, 4-8
// sketch counters (shard/admission_cache.cc).
constexpr uint64_t kReplayBytesPerSlot = 64;

}  // namespace

absl::StatusOr<std::vector<std::vector<int64_t>>> ReadTraceSequences(const std::string& path,
                                                                     int64_t vocab_size) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open trace ", path));
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> ids;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    RETURN_IF_ERROR(ParseTraceLine(line, vocab_size, path, line_no, &ids));
    if (!ids.empty()) out.push_back(ids);
  }
  if (in.bad()) return absl::InternalError(absl::StrCat("cannot read ", path));
  if (out.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("trace ", path, " has no tokens (one sequence of token ids per line)"));
  }
  return out;
}

ReplayCounts ShardReplay::all() const {
  ReplayCounts t;
  for (const ReplayCounts& l : layers) t += l;
  return t;
}

double ShardReplay::hit_ratio() const { return all().hit_ratio(); }

ReplayCounts BudgetReplay::all() const {
  ReplayCounts t;
  for (const ShardReplay& s : shards) t += s.all();
  return t;
}

double BudgetReplay::hit_ratio() const { return all().hit_ratio(); }

absl::StatusOr<std::unique_ptr<TierReplay>> TierReplay::Create(const TierReplayOptions& options) {
  if (options.table_dir.empty()) return absl::InvalidArgumentError("table_dir is required");
  if (options.n_shards < 1) return absl::InvalidArgumentError("n_shards must be at least 1");
  if (options.trace_path.empty()) return absl::InvalidArgumentError("trace_path is required");
  if (options.batch < 1) return absl::InvalidArgumentError("batch must be at least 1");
  if (options.cache_share_percent > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache_share_percent ", options.cache_share_percent, " is not in 0..100"));
  }
  if (!options.layer_pin_shares.empty()) {
    HotTierOptions placement;
    placement.layer_pin_shares = options.layer_pin_shares;
    RETURN_IF_ERROR(placement.Validate(options.layer_pin_shares.size()));
  }
  auto replay = std::unique_ptr<TierReplay>(new TierReplay());
  replay->options_ = options;
  ASSIGN_OR_RETURN(replay->manifest_, TableManifest::Load(options.table_dir));
  const TableManifest& m = replay->manifest_;
  ShardMap& map = replay->map_;
  map.table = m.table;
  map.version = m.version;
  map.n_shards = options.n_shards;
  for (const LayerInfo& l : m.layers) {
    map.layer_rows.push_back(l.rows);
    map.row_bytes.push_back(static_cast<uint32_t>(l.row_bytes));
  }
  RETURN_IF_ERROR(map.Validate());
  if (!options.layer_pin_shares.empty() && options.layer_pin_shares.size() != m.layers.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer_pin_shares has ", options.layer_pin_shares.size(), " shares; the table has ",
        m.layers.size(), " Engram layers (one share each, or none)"));
  }

  ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> sequences,
                   ReadTraceSequences(options.trace_path, m.layout.vocab_size));
  replay->profiles_.resize(options.n_shards);
  replay->profile_sizes_.assign(options.n_shards, 0);
  if (!options.profile_trace_path.empty()) {
    for (uint32_t s = 0; s < options.n_shards; ++s) {
      // The very counting `engramctl import --profile-trace` does.
      ASSIGN_OR_RETURN(replay->profiles_[s],
                       ProfileTrace(options.profile_trace_path, m.layout, map, s));
      replay->profile_sizes_[s] = replay->profiles_[s].size();
    }
  }
  RETURN_IF_ERROR(replay->BuildSteps(sequences));
  return replay;
}

absl::Status TierReplay::BuildSteps(const std::vector<std::vector<int64_t>>& sequences) {
  ASSIGN_OR_RETURN(std::unique_ptr<NgramHasher> hasher, NgramHasher::Create(manifest_.layout));
  const size_t L = static_cast<size_t>(hasher->n_layers());
  const size_t C = static_cast<size_t>(hasher->n_cols());
  const uint32_t K = map_.n_shards;
  const size_t B = static_cast<size_t>(options_.batch);
  sequences_ = sequences.size();

  // Slot b decodes line line[b] (-1: idle) at position pos[b].
  std::vector<int64_t> line(B, -1), pos(B, 0);
  std::vector<std::unique_ptr<SequenceState>> state(B);
  size_t next_line = 0;
  std::vector<size_t> active;
  std::vector<RowId> ids;
  std::vector<uint64_t> unique;
  std::vector<uint32_t> shard_of, fill(K + 1);
  KeySlotIndex seen;
  offsets_.assign(1, 0);
  while (true) {
    active.clear();
    for (size_t b = 0; b < B; ++b) {
      if (line[b] < 0 && next_line < sequences.size()) {
        line[b] = static_cast<int64_t>(next_line++);
        pos[b] = 0;
        const int64_t len = static_cast<int64_t>(sequences[line[b]].size());
        state[b] = std::make_unique<SequenceState>(
            std::max<int64_t>(SequenceState::kDefaultCapacity, len));
      }
      if (line[b] >= 0) active.push_back(b);
    }
    if (active.empty()) break;
    ids.resize(active.size() * L * C);
    for (size_t i = 0; i < active.size(); ++i) {
      const size_t b = active[i];
      const int64_t token = sequences[line[b]][pos[b]];
      RETURN_IF_ERROR(hasher->Hash(*state[b], pos[b], std::span<const int64_t>(&token, 1), {},
                                   ids.data() + i * L * C));
      tokens_ += 1;
    }
    // Per layer, as EngramClient::Impl::Dedup then GroupLayer: [B][C]
    // order, first appearance kept, then a stable counting sort by shard.
    for (size_t l = 0; l < L; ++l) {
      const size_t n = active.size() * C;
      seen.Reset(n);
      unique.clear();
      for (size_t i = 0; i < active.size(); ++i) {
        for (size_t c = 0; c < C; ++c) {
          const RowId row = ids[(i * L + l) * C + c];
          const uint32_t next = static_cast<uint32_t>(unique.size());
          if (seen.FindOrInsert(row, next) == next) unique.push_back(row);
        }
      }
      shard_of.resize(unique.size());
      std::fill(fill.begin(), fill.end(), 0);
      for (size_t k = 0; k < unique.size(); ++k) {
        shard_of[k] = map_.ShardOf(unique[k]);
        ++fill[shard_of[k] + 1];
      }
      const size_t base = rows_.size();
      for (uint32_t s = 0; s < K; ++s) {
        fill[s + 1] += fill[s];
        offsets_.push_back(base + fill[s + 1]);
      }
      rows_.resize(base + unique.size());
      for (size_t k = 0; k < unique.size(); ++k) rows_[base + fill[shard_of[k]]++] = unique[k];
    }
    ++steps_;
    for (size_t b : active) {
      if (++pos[b] == static_cast<int64_t>(sequences[line[b]].size())) {
        line[b] = -1;
        state[b].reset();
      }
    }
  }
  // Distinct rows of each shard (they bound what its admission cache can
  // ever hold).
  distinct_.assign(K, 0);
  for (uint32_t s = 0; s < K; ++s) {
    absl::flat_hash_set<uint64_t> keys;
    for (uint64_t step = 0; step < steps_; ++step) {
      for (size_t l = 0; l < L; ++l) {
        const size_t slot = Slot(step, static_cast<int>(l), s);
        for (uint64_t i = offsets_[slot]; i < offsets_[slot + 1]; ++i) {
          keys.insert(ShardKey(static_cast<uint32_t>(l), rows_[i]));
        }
      }
    }
    distinct_[s] = keys.size();
  }
  return absl::OkStatus();
}

uint64_t TierReplay::shard_rows(uint32_t shard) const {
  uint64_t rows = 0;
  for (uint32_t l = 0; l < map_.layer_rows.size(); ++l) rows += map_.RowsOnShard(l, shard);
  return rows;
}

uint64_t TierReplay::whole_tier_bytes() const { return HotTierWholeShardBytes(map_, 0); }

uint64_t TierReplay::shard_bytes() const { return options_.fixed_bytes + whole_tier_bytes(); }

uint32_t TierReplay::step_rows(uint64_t step, int layer, uint32_t shard) const {
  const size_t slot = Slot(step, layer, shard);
  return static_cast<uint32_t>(offsets_[slot + 1] - offsets_[slot]);
}

absl::StatusOr<BudgetReplay> TierReplay::Run(uint64_t budget_bytes) const {
  return Run(budget_bytes, placement());
}

absl::StatusOr<BudgetReplay> TierReplay::Run(uint64_t budget_bytes,
                                             const TierPlacement& placement) const {
  {
    HotTierOptions check;
    check.cache_share_percent = placement.cache_share_percent;
    check.layer_pin_shares = placement.layer_pin_shares;
    RETURN_IF_ERROR(check.Validate(map_.layer_rows.size()));
  }
  if (budget_bytes > shard_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("a budget of ", budget_bytes,
                                                   " bytes is larger than a shard (", shard_bytes(),
                                                   " bytes hold every row)"));
  }
  if (budget_bytes < options_.fixed_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a budget of ", budget_bytes, " bytes is below a shard's fixed ",
                     options_.fixed_bytes, " bytes (RocksDB's index)"));
  }
  const uint64_t tier_budget = budget_bytes - options_.fixed_bytes;
  BudgetReplay r;
  r.budget_bytes = budget_bytes;
  r.step_tail.assign(offsets_.size() - 1, 0);
  const uint32_t K = map_.n_shards;
  std::vector<absl::StatusOr<ShardReplay>> shards(K, absl::UnknownError("not run"));
  // Shards are independent: each writes only its own entries of step_tail.
  std::atomic<uint32_t> next{0};
  auto work = [&] {
    for (uint32_t s = next++; s < K; s = next++)
      shards[s] = RunShard(s, tier_budget, placement, &r.step_tail);
  };
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const uint32_t n =
      std::min<uint32_t>(K, options_.threads > 0 ? static_cast<uint32_t>(options_.threads) : cores);
  std::vector<std::thread> helpers;
  for (uint32_t i = 1; i < n; ++i) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  for (absl::StatusOr<ShardReplay>& shard : shards) {
    if (!shard.ok()) return shard.status();
    r.shards.push_back(*std::move(shard));
  }
  return r;
}

absl::StatusOr<ShardReplay> TierReplay::RunShard(uint32_t shard, uint64_t budget,
                                                 const TierPlacement& placement,
                                                 std::vector<uint32_t>* step_tail) const {
  const int L = n_layers();
  ShardReplay out;
  out.layers.resize(static_cast<size_t>(L));
  if (HotTierHoldsWholeShard(map_, shard, budget)) {
    // Every row pinned (HotTier::Build's dense tier): no cache, no tail.
    out.whole_shard = true;
    out.pinned_rows = shard_rows(shard);
    for (uint64_t step = 0; step < steps_; ++step) {
      for (int l = 0; l < L; ++l) out.layers[l].pinned += step_rows(step, l, shard);
    }
    return out;
  }
  HotTierOptions tier;
  tier.budget_bytes = budget;
  tier.cache_share_percent = placement.cache_share_percent;
  tier.layer_pin_shares = placement.layer_pin_shares;
  tier.worker_cache_bytes = options_.worker_cache_bytes;
  // As HotTier::Build: a profile is used when there is a budget to pin.
  const bool use_profile = budget > 0 && !options_.profile_trace_path.empty();
  ASSIGN_OR_RETURN(HotTierPlan plan,
                   PlanHotTier(map_, shard, tier, use_profile ? &profiles_[shard] : nullptr));
  out.pinned_rows = plan.pinned_keys.size();
  out.cache_slots = plan.cache_slots;
  const absl::flat_hash_set<uint64_t> pinned(plan.pinned_keys.begin(), plan.pinned_keys.end());
  plan.pinned_keys = {};

  // The cache: none, provably never full (a set of the rows it admitted),
  // or the real one.
  const uint64_t lock_shards = static_cast<uint64_t>(std::max(1, AdmissionCacheOptions{}.shards));
  const bool never_full =
      plan.cache_slots > 0 && distinct_[shard] <= plan.cache_slots / lock_shards;
  out.cache_never_full = never_full;
  std::unique_ptr<AdmissionCache> cache;
  absl::flat_hash_set<uint64_t> admitted;
  if (plan.cache_slots > 0 && !never_full) {
    if (plan.cache_slots > options_.max_cache_replay_bytes / kReplayBytesPerSlot) {
      return absl::ResourceExhaustedError(
          absl::StrCat("replaying shard ", shard, "'s admission cache of ", plan.cache_slots,
                       " slots at a budget of ", budget, " bytes needs about ",
                       plan.cache_slots * kReplayBytesPerSlot >> 20,
                       " MiB (over max_cache_replay_bytes); try a smaller budget"));
    }
    AdmissionCacheOptions co;
    co.slots = plan.cache_slots;
    co.slot_bytes = 1;  // decisions never depend on the bytes
    cache = std::make_unique<AdmissionCache>(co);
  }
  uint8_t scratch = 0;
  std::vector<uint64_t> misses;
  for (uint64_t step = 0; step < steps_; ++step) {
    for (int l = 0; l < L; ++l) {
      const size_t slot = Slot(step, l, shard);
      ReplayCounts& counts = out.layers[l];
      misses.clear();
      // HotTierImpl::LookupBatch: the pinned set, then the cache.
      for (uint64_t i = offsets_[slot]; i < offsets_[slot + 1]; ++i) {
        const uint64_t key = ShardKey(static_cast<uint32_t>(l), rows_[i]);
        if (pinned.contains(key)) {
          ++counts.pinned;
        } else if (cache != nullptr ? cache->Lookup(key, &scratch, 1)
                                    : never_full && admitted.contains(key)) {
          ++counts.cached;
        } else {
          misses.push_back(key);
        }
      }
      counts.disk += misses.size();
      (*step_tail)[slot] = static_cast<uint32_t>(misses.size());
      // StoreService: after the request's disk read, HotTier::Admit of
      // each miss, in order.
      for (uint64_t key : misses) {
        if (cache != nullptr) {
          cache->Admit(key, &scratch, 1);
        } else if (never_full) {
          admitted.insert(key);
        }
      }
    }
  }
  return out;
}

}  // namespace engram
