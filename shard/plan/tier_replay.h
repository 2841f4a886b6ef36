// TierReplay: what a shard's hot tier does with a token trace at a RAM
// budget, by replaying the trace, not by estimating it.
//
// The trace is decoded as a worker's EngramClient::Prefetch sees it: trace
// lines are sequences, `batch` of them decoded in lockstep, one token each
// per step (continuous batching: a sequence that ends frees its slot, and
// the next unread line starts there at position 0, so every step but the
// last few has `batch` sequences). Each step's tokens are hashed with the
// client's bit-exact NgramHasher (one SequenceState per sequence), each
// layer's row ids de-duplicated across the batch in the client's order
// ([B][C], first appearance kept) and grouped by shard (row % K, order kept):
// exactly the rows, and the order, of the step's Lookup to each shard.
//
// Run(budget) then feeds every shard its Lookups, step by step and layer
// by layer, through the shard server's own policy: the pinned set and the
// admission cache's size from PlanHotTier (shard/hot_tier.h; the profile of
// each shard counted from `profile_trace_path` by ProfileTrace, as
// `engramctl import --profile-trace` writes hot_profile.bin; the placement,
// cache share and layer shares, the options' or Run's), and for the
// rest the real AdmissionCache, called as HotTier and StoreService call it:
// a Lookup for every row the pinned set misses (in request order), then,
// once the request's disk read is done, an Admit of each miss (in order).
//
// Exact where the shard is sequential: the counts equal a shard's
// engram_shard_rows_total when each (shard, layer) Lookup of a step is one
// request served before the next arrives (one worker, the client's
// pipeline_layers, shard rows of a layer <= max_rows_per_rpc, a request
// below the gather split or gather_threads 0; tools/plan_test.cc checks
// equality against real servers). Concurrent workers or split requests
// interleave Lookups and Admits differently; only the admission cache's
// share can then differ, the pinned share never does.
//
// The cache is replayed without row bytes (1-byte slots: its decisions do
// not depend on them). When the shard's distinct rows in the whole trace
// fit every lock shard of the cache (<= slots / AdmissionCacheOptions
// ::shards), the cache provably never evicts or refuses, so it is replayed
// as "a row is cached once a previous request missed it", which is what it
// does then, in memory proportional to the trace rather than the budget.
//
//   TierReplayOptions o;
//   o.table_dir = "/data/table"; o.n_shards = 4; o.trace_path = "work.trace";
//   o.profile_trace_path = "corpus.trace"; o.batch = 64;
//   ASSIGN_OR_RETURN(std::unique_ptr<TierReplay> replay, TierReplay::Create(o));
//   ASSIGN_OR_RETURN(BudgetReplay r, replay->Run(uint64_t{1} << 30));
//   ... r.hit_ratio(), r.shards[s].tail_rows() ...
//
// Threading: a TierReplay is immutable once created; Run may be called
// from several threads at once (each Run has its own caches, and replays
// its shards on up to `threads` threads of its own).
#ifndef ENGRAM_SHARD_PLAN_TIER_REPLAY_H_
#define ENGRAM_SHARD_PLAN_TIER_REPLAY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/format/hot_profile.h"
#include "common/format/shard_map.h"
#include "common/format/table.h"
#include "shard/hot_tier.h"

namespace engram {

// A token trace file (tools/make-trace: one sequence per line, token ids
// separated by blanks), read with ProfileTrace's rules: tokens split on
// spaces, tabs and CRs, each an integer in [0, vocab_size); empty lines are
// skipped. InvalidArgument naming the file and line for a bad token or a
// trace with no tokens; NotFound when it cannot be opened.
absl::StatusOr<std::vector<std::vector<int64_t>>> ReadTraceSequences(const std::string& path,
                                                                     int64_t vocab_size);

// Where a shard's hot tier puts its budget: HotTierOptions'
// cache_share_percent and layer_pin_shares (what a shard's tier_plan.json
// sets; shard/shard_format.h).
struct TierPlacement {
  uint32_t cache_share_percent = kHotTierCacheSharePercent;
  // Empty = by frequency (the profile's order across layers); else one
  // share of the pinned budget per layer (HotTierOptions::layer_pin_shares).
  std::vector<double> layer_pin_shares;
  bool operator==(const TierPlacement&) const = default;
};

struct TierReplayOptions {
  // The table directory: only manifest.json is read (hash layout, rows and
  // row bytes per layer). REQUIRED.
  std::string table_dir;
  // Shard servers K (row r on shard r % K). REQUIRED, >= 1.
  uint32_t n_shards = 0;
  // The workload to replay (ReadTraceSequences). REQUIRED.
  std::string trace_path;
  // The trace the shards' hot_profile.bin were built from (`engramctl
  // import --profile-trace`); empty = none: nothing is pinned below a whole
  // shard, the whole budget is the admission cache.
  std::string profile_trace_path;
  // Sequences decoded per step (>= 1).
  int batch = 64;
  // Each shard's fixed bytes (ShardFootprint::fixed_bytes: RocksDB's index
  // of its table files), charged to a budget before the hot tier as
  // engram-shard does. 0 = none.
  uint64_t fixed_bytes = 0;
  // HotTierOptions::cache_share_percent with a profile: the shard server's
  // default, kHotTierCacheSharePercent = 20.
  uint32_t cache_share_percent = kHotTierCacheSharePercent;
  // HotTierOptions::layer_pin_shares: empty = by frequency (engram-shard
  // without a tier_plan.json), else one share per layer.
  std::vector<double> layer_pin_shares;
  // HotTierOptions::worker_cache_bytes, this shard's share of the workers'
  // caches (engram-shard --worker-cache-bytes / K); 0 = none. The workers' own cache is not
  // replayed: keep it 0 unless the trace's rows were filtered the same way.
  uint64_t worker_cache_bytes = 0;
  // A Run whose admission cache must be replayed slot by slot and would
  // need more than this many bytes of bookkeeping (~64 a slot) fails with
  // ResourceExhausted instead of exhausting the machine.
  uint64_t max_cache_replay_bytes = uint64_t{8} << 30;
  // Shards replayed at once by Run, each on a thread of its own with its
  // own cache (memory-bound: on this 2-vCPU VM two threads were slower
  // than one); 0 = one per core.
  int threads = 1;
};

// Rows one shard served for one layer, by the tier that held them.
struct ReplayCounts {
  uint64_t pinned = 0;
  uint64_t cached = 0;
  uint64_t disk = 0;
  uint64_t total() const { return pinned + cached + disk; }
  // Pinned and cached over all (1 when there are none).
  double hit_ratio() const {
    return total() == 0 ? 1.0 : static_cast<double>(pinned + cached) / static_cast<double>(total());
  }
  ReplayCounts& operator+=(const ReplayCounts& o) {
    pinned += o.pinned;
    cached += o.cached;
    disk += o.disk;
    return *this;
  }
};

// One shard at one budget.
struct ShardReplay {
  uint64_t pinned_rows = 0;  // HotTierPlan: rows pinned
  uint64_t cache_slots = 0;  // HotTierPlan: the admission cache's slots
  bool whole_shard = false;
  // The admission cache was replayed as never full (see the top of this
  // file): every lock shard holds all of the shard's distinct rows.
  bool cache_never_full = false;
  std::vector<ReplayCounts> layers;  // per layer, over the whole trace
  ReplayCounts all() const;
  uint64_t tail_rows() const { return all().disk; }
  double hit_ratio() const;  // (pinned + cached) / rows; 1 with no rows
};

// One budget, every shard.
struct BudgetReplay {
  uint64_t budget_bytes = 0;
  std::vector<ShardReplay> shards;  // [K]
  // Tail (disk) rows of each step's Lookup: [step][layer][shard].
  std::vector<uint32_t> step_tail;
  ReplayCounts all() const;
  double hit_ratio() const;
};

class TierReplay {
 public:
  // Reads the manifest, the trace and (once per shard) the profile trace,
  // hashes and de-duplicates the whole trace into the per-step Lookups.
  // InvalidArgument for bad options (naming the field) or a bad trace;
  // NotFound for a missing table or trace.
  static absl::StatusOr<std::unique_ptr<TierReplay>> Create(const TierReplayOptions& options);

  // Replays every shard at `budget_bytes` (RAM per shard, as engram-shard
  // --ram-budget: fixed_bytes, then the hot tier). InvalidArgument when the
  // budget is below fixed_bytes or above a shard (shard_bytes());
  // ResourceExhausted, see max_cache_replay_bytes.
  absl::StatusOr<BudgetReplay> Run(uint64_t budget_bytes) const;
  // The same with another placement than the options' (the shards' hot
  // tiers built with it: PlanHotTier); InvalidArgument for a placement
  // HotTierOptions::Validate refuses.
  absl::StatusOr<BudgetReplay> Run(uint64_t budget_bytes, const TierPlacement& placement) const;
  // The options' placement (cache_share_percent, layer_pin_shares).
  TierPlacement placement() const {
    return {options_.cache_share_percent, options_.layer_pin_shares};
  }

  const TierReplayOptions& options() const { return options_; }
  const TableManifest& manifest() const { return manifest_; }
  const ShardMap& map() const { return map_; }
  // The budget that holds shard 0 (the largest: rows are dealt
  // round-robin) whole: fixed_bytes plus HotTierWholeShardBytes. A budget
  // of this many bytes pins every row of every shard.
  uint64_t shard_bytes() const;
  // shard_bytes() less fixed_bytes: the hot tier that pins every row.
  uint64_t whole_tier_bytes() const;
  uint64_t shard_rows(uint32_t shard) const;
  int n_layers() const { return static_cast<int>(map_.layer_rows.size()); }
  uint64_t sequences() const { return sequences_; }
  uint64_t tokens() const { return tokens_; }
  uint64_t steps() const { return steps_; }
  // Rows a shard is asked for in a step's Lookup of a layer (after
  // de-duplication): [step][layer][shard], as BudgetReplay::step_tail.
  uint32_t step_rows(uint64_t step, int layer, uint32_t shard) const;
  // Entries of each shard's profile (0 without a profile trace).
  uint64_t profile_rows(uint32_t shard) const { return profile_sizes_[shard]; }
  // Distinct rows of each shard in the trace.
  uint64_t distinct_rows(uint32_t shard) const { return distinct_[shard]; }

 private:
  TierReplay() = default;
  size_t Slot(uint64_t step, int layer, uint32_t shard) const {
    return (static_cast<size_t>(step) * map_.layer_rows.size() + static_cast<size_t>(layer)) *
               map_.n_shards +
           shard;
  }
  absl::Status BuildSteps(const std::vector<std::vector<int64_t>>& sequences);
  absl::StatusOr<ShardReplay> RunShard(uint32_t shard, uint64_t budget,
                                       const TierPlacement& placement,
                                       std::vector<uint32_t>* step_tail) const;

  TierReplayOptions options_;
  TableManifest manifest_;
  ShardMap map_;
  std::vector<std::vector<HotProfileEntry>> profiles_;  // [K]; empty without a trace
  std::vector<uint64_t> profile_sizes_;
  std::vector<uint64_t> distinct_;
  uint64_t sequences_ = 0, tokens_ = 0, steps_ = 0;
  // Each step's Lookups: the rows of (step, layer, shard) are
  // rows_[offsets_[Slot]] .. rows_[offsets_[Slot + 1]], in request order.
  std::vector<uint64_t> rows_;
  std::vector<uint64_t> offsets_;
};

}  // namespace engram

#endif  // ENGRAM_SHARD_PLAN_TIER_REPLAY_H_
