// Window-aware placement: which layers' rows a shard's hot tier pins, and
// how much of the budget stays with the admission cache, chosen for a
// budget by the predicted exposed wait (shard/plan/tier_plan.h) of a
// replayed trace (shard/plan/tier_replay.h).
//
// The first Engram layer has one block between Prefetch and the step that
// needs it, a later one many (engram_layer_ids). The frequency policy
// spends the pinned budget on the hottest rows of all layers alike, so the
// first layer's tail, which cannot arrive inside its single block, goes to
// disk while the later layer's window sits idle. A placement gives each
// layer a share of the pinned budget (HotTierOptions::layer_pin_shares);
// ChoosePlacement replays candidates through the exact hot-tier policy and
// keeps the one with the least predicted exposed wait:
//
//   for each cache share of PlacementSearchOptions::cache_share_percents:
//     the frequency policy, and
//     2 layers: every layer-0 share s on a grid of share_step (s, 1 - s);
//     more: coordinate descent from equal shares, moving share_step of
//     the pinned budget from one layer to another while the wait falls.
//
// The frequency policy at the replay's own cache share is evaluated first
// and kept on ties, so a choice never predicts more wait than the policy
// engram-shard runs without a tier_plan.json. A budget that holds the
// whole shard, or a replay without a profile (nothing pinned), has nothing
// to choose: the frequency policy.
//
//   ASSIGN_OR_RETURN(PlacementChoice c, ChoosePlacement(*replay, budget, model));
//   ... c.placement.layer_pin_shares, c.plan.exposed_wait_percent ...
//
// Thread-safe (a TierReplay is immutable); each call replays on up to
// PlacementSearchOptions::threads threads of its own.
#ifndef ENGRAM_SHARD_PLAN_PLACEMENT_H_
#define ENGRAM_SHARD_PLAN_PLACEMENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "shard/plan/tier_plan.h"
#include "shard/plan/tier_replay.h"
#include "shard/shard_format.h"

namespace engram {

struct PlacementSearchOptions {
  // Admission cache shares tried (percent of the budget, each <= 100).
  std::vector<uint32_t> cache_share_percents = {0, 10, 20};
  // Step of the layer shares, in (0, 1]: the grid of 2 layers, the moves
  // of coordinate descent.
  double share_step = 0.05;
  // Coordinate descent (3 or more layers): passes over every pair of
  // layers at most.
  int max_rounds = 8;
  // Placements replayed at once (each a TierReplay::Run); 0 = one per core.
  int threads = 0;

  // InvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

struct PlacementChoice {
  TierPlacement placement;  // the least predicted exposed wait
  BudgetPlan plan;          // at `placement`
  // The frequency policy at the replay's cache share (engram-shard without
  // a tier plan), for comparison; plan.exposed_wait_percent <= its.
  BudgetPlan frequency;
  int evaluated = 0;  // placements replayed
};

// The placement of `budget_bytes` (as TierReplay::Run) with the least
// predicted exposed wait (then the higher hit ratio; with every candidate's
// disk saturated, the least utilised disk). Errors of the replay or the
// model (PlanBudget).
absl::StatusOr<PlacementChoice> ChoosePlacement(const TierReplay& replay, uint64_t budget_bytes,
                                                const PlanModelOptions& model,
                                                const PlacementSearchOptions& search = {});

// The budget of `percent` of a shard (TierReplay::shard_bytes): rounded to
// whole MiB (whole KiB below 64 MiB, bytes below 64 KiB), so the size is
// one engram-shard --ram-budget takes as printed; 100 (or more) is the
// shard's exact size.
uint64_t BudgetOfPercent(double percent, uint64_t shard_bytes);

// The tier_plan.json of `placement` (shard/shard_format.h): policy window
// with its layer percents (4 decimals), or frequency; the cache share;
// the budget it was chosen for (0 = not given) and its prediction when
// there is one.
TierPlanFile TierPlanOf(const TierPlacement& placement, uint64_t budget_bytes = 0,
                        std::optional<double> predicted_exposed_wait_percent = std::nullopt);

// "window" chooses the placement per budget (ChoosePlacement); "frequency"
// is engram-shard without a tier plan.
enum class PlacementPolicy { kWindow, kFrequency };
const char* PlacementPolicyName(PlacementPolicy policy);
absl::StatusOr<PlacementPolicy> ParsePlacementPolicy(const std::string& name);

// The plan of `budget_bytes` under `policy`: ChoosePlacement's, or the
// frequency policy at the replay's placement (then `frequency` and `plan`
// are the same).
absl::StatusOr<PlacementChoice> PlanPlacement(const TierReplay& replay, uint64_t budget_bytes,
                                              PlacementPolicy policy, const PlanModelOptions& model,
                                              const PlacementSearchOptions& search = {});

struct TargetBudget {
  bool found = false;      // some budget up to the whole shard meets the target
  double percent = 0;      // of a shard, a multiple of the step
  uint64_t bytes = 0;      // BudgetOfPercent(percent)
  PlacementChoice choice;  // at that budget
  int budgets_evaluated = 0;
};

// The smallest budget of `step_percent` steps of a shard (0 < step <= 100;
// budgets below the replay's fixed_bytes are skipped) whose predicted
// exposed wait under `policy` is at most `target_percent`, by bisection:
// it takes the wait to fall as the budget grows (what a larger pinned set
// does; the admission cache can break it by a little). Not found when the
// whole shard misses the target.
absl::StatusOr<TargetBudget> SmallestBudgetForTarget(const TierReplay& replay,
                                                     double target_percent, PlacementPolicy policy,
                                                     const PlanModelOptions& model,
                                                     const PlacementSearchOptions& search = {},
                                                     double step_percent = 1);

}  // namespace engram

#endif  // ENGRAM_SHARD_PLAN_PLACEMENT_H_
