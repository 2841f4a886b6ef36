#include "shard/plan/placement.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"
#include "shard/hot_tier.h"

namespace engram {
namespace {

// Predicted waits closer than this are equal.
constexpr double kTie = 1e-9;

// a predicts less wait than b (then: a higher hit ratio; both saturated:
// a less utilised disk).
bool Better(const BudgetPlan& a, const BudgetPlan& b) {
  if (a.disk_saturated || b.disk_saturated) {
    if (a.disk_saturated != b.disk_saturated) return b.disk_saturated;
    return a.max_disk_utilization < b.max_disk_utilization - kTie;
  }
  if (a.exposed_wait_percent < b.exposed_wait_percent - kTie) return true;
  if (a.exposed_wait_percent > b.exposed_wait_percent + kTie) return false;
  return a.hit_ratio > b.hit_ratio + kTie;
}

// Replays and plans every placement, on up to `threads` threads.
std::vector<absl::StatusOr<BudgetPlan>> Evaluate(const TierReplay& replay, uint64_t budget,
                                                 const PlanModelOptions& model,
                                                 const std::vector<TierPlacement>& placements,
                                                 int threads) {
  std::vector<absl::StatusOr<BudgetPlan>> out(placements.size(), absl::UnknownError("not run"));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < placements.size(); i = next++) {
      absl::StatusOr<BudgetReplay> r = replay.Run(budget, placements[i]);
      out[i] = r.ok() ? PlanBudget(replay, *r, model) : absl::StatusOr<BudgetPlan>(r.status());
    }
  };
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t n = std::min<size_t>(placements.size(),
                                    threads > 0 ? static_cast<size_t>(threads) : size_t{cores});
  std::vector<std::thread> helpers;
  for (size_t i = 1; i < n; ++i) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  return out;
}

// The search's state: the best placement so far.
struct Search {
  const TierReplay& replay;
  uint64_t budget;
  const PlanModelOptions& model;
  const PlacementSearchOptions& options;
  PlacementChoice choice;

  // Evaluates the placements and keeps the best; the index of each's
  // plan in *plans when given.
  absl::Status Try(const std::vector<TierPlacement>& placements,
                   std::vector<BudgetPlan>* plans = nullptr) {
    std::vector<absl::StatusOr<BudgetPlan>> got =
        Evaluate(replay, budget, model, placements, options.threads);
    for (size_t i = 0; i < got.size(); ++i) {
      if (!got[i].ok()) return got[i].status();
      ++choice.evaluated;
      if (Better(*got[i], choice.plan)) {
        choice.plan = *got[i];
        choice.placement = placements[i];
      }
      if (plans != nullptr) plans->push_back(*std::move(got[i]));
    }
    return absl::OkStatus();
  }

  // Coordinate descent over the layer shares at one cache share, from
  // equal shares: move `step` from layer j to layer i while that helps.
  absl::Status Descend(uint32_t cache_share, int layers) {
    const double step = options.share_step;
    TierPlacement at{cache_share, std::vector<double>(layers, 1.0 / layers)};
    std::vector<BudgetPlan> plans;
    RETURN_IF_ERROR(Try({at}, &plans));
    BudgetPlan here = plans.back();
    for (int round = 0; round < options.max_rounds; ++round) {
      std::vector<TierPlacement> moves;
      for (int i = 0; i < layers; ++i) {
        for (int j = 0; j < layers; ++j) {
          if (i == j || at.layer_pin_shares[j] < step - kTie) continue;
          TierPlacement m = at;
          m.layer_pin_shares[j] = std::max(0.0, m.layer_pin_shares[j] - step);
          m.layer_pin_shares[i] = std::min(1.0, m.layer_pin_shares[i] + step);
          moves.push_back(std::move(m));
        }
      }
      plans.clear();
      RETURN_IF_ERROR(Try(moves, &plans));
      size_t best = plans.size();
      for (size_t k = 0; k < plans.size(); ++k) {
        if (Better(plans[k], best == plans.size() ? here : plans[best])) best = k;
      }
      if (best == plans.size()) break;  // no move helps
      at = moves[best];
      here = plans[best];
    }
    return absl::OkStatus();
  }
};

}  // namespace

absl::Status PlacementSearchOptions::Validate() const {
  if (cache_share_percents.empty()) {
    return absl::InvalidArgumentError("cache_share_percents is empty: give at least one share");
  }
  for (uint32_t c : cache_share_percents) {
    if (c > 100) {
      return absl::InvalidArgumentError(
          absl::StrCat("cache_share_percents: ", c, " is not in 0..100"));
    }
  }
  if (!(share_step > 0 && share_step <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("share_step ", share_step, " is not in (0, 1]"));
  }
  if (max_rounds < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_rounds ", max_rounds, " is negative"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PlacementChoice> ChoosePlacement(const TierReplay& replay, uint64_t budget_bytes,
                                                const PlanModelOptions& model,
                                                const PlacementSearchOptions& search) {
  RETURN_IF_ERROR(search.Validate());
  const TierPlacement frequency{replay.options().cache_share_percent, {}};
  ASSIGN_OR_RETURN(BudgetReplay base, replay.Run(budget_bytes, frequency));
  ASSIGN_OR_RETURN(BudgetPlan base_plan, PlanBudget(replay, base, model));
  Search s{replay, budget_bytes, model, search, {}};
  s.choice.placement = frequency;
  s.choice.plan = base_plan;
  s.choice.frequency = base_plan;
  s.choice.evaluated = 1;
  const bool whole = budget_bytes >= replay.shard_bytes();
  const bool nothing_pinned = replay.options().profile_trace_path.empty();
  if (whole || nothing_pinned ||
      (!base_plan.disk_saturated && base_plan.exposed_wait_percent <= 0)) {
    return s.choice;  // nothing to choose, or nothing to gain
  }
  const int layers = replay.n_layers();
  for (uint32_t cache_share : search.cache_share_percents) {
    std::vector<TierPlacement> candidates;
    if (cache_share != frequency.cache_share_percent) candidates.push_back({cache_share, {}});
    if (layers == 2) {
      const int n = static_cast<int>(std::floor(1 / search.share_step + kTie));
      for (int i = 0; i <= n; ++i) {
        const double first = std::min(1.0, i * search.share_step);
        candidates.push_back({cache_share, {first, 1 - first}});
      }
      RETURN_IF_ERROR(s.Try(candidates));
    } else if (layers > 2) {
      RETURN_IF_ERROR(s.Try(candidates));
      RETURN_IF_ERROR(s.Descend(cache_share, layers));
    }
  }
  return s.choice;
}

uint64_t BudgetOfPercent(double percent, uint64_t shard_bytes) {
  if (percent >= 100) return shard_bytes;
  const double exact = std::max(0.0, percent) / 100 * static_cast<double>(shard_bytes);
  uint64_t unit = 1;
  for (uint64_t u : {uint64_t{1} << 20, uint64_t{1} << 10}) {
    if (exact >= 64.0 * static_cast<double>(u)) {
      unit = u;
      break;
    }
  }
  return std::min<uint64_t>(
      shard_bytes, static_cast<uint64_t>(std::llround(exact / static_cast<double>(unit))) * unit);
}

const char* PlacementPolicyName(PlacementPolicy policy) {
  return policy == PlacementPolicy::kWindow ? "window" : "frequency";
}

absl::StatusOr<PlacementPolicy> ParsePlacementPolicy(const std::string& name) {
  if (name == "window") return PlacementPolicy::kWindow;
  if (name == "frequency") return PlacementPolicy::kFrequency;
  return absl::InvalidArgumentError(
      absl::StrCat("placement policy \"", name, "\" is not window or frequency"));
}

absl::StatusOr<PlacementChoice> PlanPlacement(const TierReplay& replay, uint64_t budget_bytes,
                                              PlacementPolicy policy, const PlanModelOptions& model,
                                              const PlacementSearchOptions& search) {
  if (policy == PlacementPolicy::kWindow) {
    return ChoosePlacement(replay, budget_bytes, model, search);
  }
  PlacementChoice c;
  c.placement = replay.placement();
  ASSIGN_OR_RETURN(BudgetReplay r, replay.Run(budget_bytes, c.placement));
  ASSIGN_OR_RETURN(c.plan, PlanBudget(replay, r, model));
  c.frequency = c.plan;
  c.evaluated = 1;
  return c;
}

absl::StatusOr<TargetBudget> SmallestBudgetForTarget(const TierReplay& replay,
                                                     double target_percent, PlacementPolicy policy,
                                                     const PlanModelOptions& model,
                                                     const PlacementSearchOptions& search,
                                                     double step_percent) {
  if (!(step_percent > 0 && step_percent <= 100)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step_percent ", step_percent, " is not in (0, 100]"));
  }
  const uint64_t shard = replay.shard_bytes();
  const int last = static_cast<int>(std::ceil(100 / step_percent - kTie));
  auto percent_of = [&](int i) { return std::min(100.0, i * step_percent); };
  int first = 0;
  while (first < last && BudgetOfPercent(percent_of(first), shard) < replay.options().fixed_bytes) {
    ++first;
  }
  TargetBudget out;
  std::map<int, PlacementChoice> seen;
  auto meets = [&](int i) -> absl::StatusOr<bool> {
    auto it = seen.find(i);
    if (it == seen.end()) {
      ASSIGN_OR_RETURN(
          PlacementChoice c,
          PlanPlacement(replay, BudgetOfPercent(percent_of(i), shard), policy, model, search));
      ++out.budgets_evaluated;
      it = seen.emplace(i, std::move(c)).first;
    }
    const BudgetPlan& p = it->second.plan;
    return !p.disk_saturated && p.exposed_wait_percent <= target_percent;
  };
  ASSIGN_OR_RETURN(bool whole, meets(last));
  if (!whole) return out;
  int lo = first - 1, hi = last;  // lo misses (or is below the range), hi meets
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    ASSIGN_OR_RETURN(bool ok, meets(mid));
    (ok ? hi : lo) = mid;
  }
  out.found = true;
  out.percent = percent_of(hi);
  out.bytes = BudgetOfPercent(out.percent, shard);
  out.choice = seen.at(hi);
  return out;
}

TierPlanFile TierPlanOf(const TierPlacement& placement, uint64_t budget_bytes,
                        std::optional<double> predicted_exposed_wait_percent) {
  TierPlanFile f;
  f.policy = placement.layer_pin_shares.empty() ? TierPlanFile::Policy::kFrequency
                                                : TierPlanFile::Policy::kWindow;
  f.cache_share_percent = placement.cache_share_percent;
  for (double share : placement.layer_pin_shares) {
    f.layer_pin_percent.push_back(std::round(share * 1e6) / 1e4);  // percent, 4 decimals
  }
  f.ram_budget_bytes = budget_bytes;
  f.predicted_exposed_wait_percent = predicted_exposed_wait_percent;
  return f;
}

}  // namespace engram
