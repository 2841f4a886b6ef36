// The capacity planner alone: the replay of a trace through the hot tier's
// policy at the extremes, the plan's rates against the replay, and the
// fetch model on hand-computed steps. (Against real shard servers and
// through engramctl: tests/plan_test.cc.)
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/testing/test_files.h"
#include "gtest/gtest.h"
#include "shard/plan/placement.h"
#include "shard/plan/tier_plan.h"
#include "shard/plan/tier_replay.h"

namespace engram {
namespace {

constexpr int kBatch = 4;

// A small table split 3 ways, a Zipf workload and a profile trace, with
// the replay of one through the other.
std::unique_ptr<TierReplay> Replay() {
  static testing::TempDir* dir = new testing::TempDir("tier-plan-test");
  static const bool made = [] {
    testing::WriteZipfTrace(dir->Sub("work.trace"), 1, 18, 20, 90, 400);
    testing::WriteZipfTrace(dir->Sub("profile.trace"), 2, 30, 20, 90, 400);
    return testing::MakeSmallTable(dir->Sub("table"), 2000, 7).ok();
  }();
  EXPECT_TRUE(made);
  TierReplayOptions o;
  o.table_dir = dir->Sub("table");
  o.n_shards = 3;
  o.trace_path = dir->Sub("work.trace");
  o.profile_trace_path = dir->Sub("profile.trace");
  o.batch = kBatch;
  absl::StatusOr<std::unique_ptr<TierReplay>> r = TierReplay::Create(o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : nullptr;
}

TEST(TierReplay, WholeShardAndNoBudget) {
  std::unique_ptr<TierReplay> replay = Replay();
  ASSERT_NE(replay, nullptr);
  absl::StatusOr<BudgetReplay> whole = replay->Run(replay->shard_bytes());
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->hit_ratio(), 1.0);
  absl::StatusOr<BudgetReplay> none = replay->Run(0);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->hit_ratio(), 0.0);
  EXPECT_EQ(none->all().disk, whole->all().pinned);
  EXPECT_EQ(replay->Run(replay->shard_bytes() + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TierPlan, RatesFollowTheReplay) {
  std::unique_ptr<TierReplay> replay = Replay();
  ASSERT_NE(replay, nullptr);
  PlanModelOptions m;
  m.disk_iops = 50000;
  m.tokens_per_second = 200;
  m.workers = 3;
  absl::StatusOr<std::vector<BudgetPlan>> plans =
      PlanBudgets(*replay, {0, replay->shard_bytes() / 4, replay->shard_bytes()}, m);
  ASSERT_TRUE(plans.ok()) << plans.status();
  const double steps_per_second = 3 * 200.0 / kBatch;
  for (const BudgetPlan& p : *plans) {
    for (const ShardPlan& s : p.shards) {
      EXPECT_DOUBLE_EQ(s.tail_rows_per_second,
                       static_cast<double>(s.rows.disk) / replay->steps() * steps_per_second);
      EXPECT_DOUBLE_EQ(s.disk_utilization, s.tail_rows_per_second / m.disk_iops);
    }
  }
  EXPECT_GT((*plans)[0].exposed_wait_percent, (*plans)[1].exposed_wait_percent);
  EXPECT_EQ((*plans)[2].exposed_wait_percent, 0.0);  // nothing from disk, rtt + send < 1 block
  EXPECT_EQ((*plans)[2].max_tail_rows_per_second, 0.0);
  m.disk_iops = 30;  // far too slow for the tail at 200 tokens/s per worker
  plans = PlanBudgets(*replay, {0}, m);
  ASSERT_TRUE(plans.ok());
  EXPECT_TRUE((*plans)[0].disk_saturated);
  // Paced by the disk: each worker's steps read at a third of its rate.
  absl::StatusOr<BudgetReplay> all_disk = replay->Run(0);
  ASSERT_TRUE(all_disk.ok());
  const double paced =
      IdealExposedWaitPercent(*replay, *all_disk, 10, m.disk_latency_us, m.block_us, m.blocks);
  EXPECT_DOUBLE_EQ((*plans)[0].exposed_wait_percent, paced);
  EXPECT_GT(paced, 50.0);
  EXPECT_LT(paced, 100.0);
}

// Hand-computed steps of the fetch model: 2 shards, links of 1e9 bytes/s,
// 1000-byte rows, blocks of 100 us, layers needed at blocks 1 and 5.
TEST(FetchModel, HandComputedSteps) {
  PlanModelOptions o;
  o.disk_iops = 1000;
  o.disk_latency_us = 100;
  o.network_gbps = 8;
  o.rtt_us = 10;
  o.block_us = 100;
  o.blocks = 10;
  o.fetch_order = FetchOrder::kSequential;
  std::vector<double> exposed;
  auto step = [&exposed](const FetchModel& m, std::vector<uint32_t> rows,
                         std::vector<uint32_t> tail) { return m.Step(rows, tail, &exposed); };
  {
    const FetchModel m(o, {1, 5}, {1000, 1000}, {0, 0});
    // Layer 0: shard 0 = 100 us disk + 2 reads / 1000 IOPS + 100 rows x
    // 1 us = 2200 us; shard 1 sends 50 us; fetch 10 + 2200 = 2210 us,
    // needed at 100 us: 2110 us exposed. Layer 1 leaves at 2210 us,
    // arrives at 2210 + 10 + max(10, 10 + 10 sent on the worker's link)
    // = 2240 us, needed at 500 + 2110: not exposed.
    const double e = step(m, {100, 50, 10, 10}, {2, 0, 0, 0});
    EXPECT_NEAR(e, 2110e-6, 1e-12);
    EXPECT_NEAR(exposed[0], 2110e-6, 1e-12);
    EXPECT_EQ(exposed[1], 0);
    EXPECT_NEAR(m.step_seconds(), 1e-3, 1e-15);
    // Layer 1 late alone: 10 + 1 us = 11 us for layer 0 (in time), then
    // layer 1: 10 + 100 + 3000 + 1 = 3111 us, arriving at 3122 us, needed at
    // 500 us: 2622 us exposed.
    step(m, {1, 0, 1, 0}, {0, 0, 3, 0});
    EXPECT_EQ(exposed[0], 0);
    EXPECT_NEAR(exposed[1], 2622e-6, 1e-12);
    // The worker's link: 400 rows from each shard, none from disk: 10 + 800.
    step(m, {400, 400, 0, 0}, {0, 0, 0, 0});
    EXPECT_NEAR(exposed[0], 710e-6, 1e-12);
  }
  {
    // Two workers, shard 0's disk 50% busy: the other worker takes half
    // of that, 750 IOPS are left: 100 + 2666.67 + 100 + 10 - 100 exposed.
    o.workers = 2;
    const FetchModel m(o, {1, 5}, {1000, 1000}, {0.5, 0});
    step(m, {100, 50, 10, 10}, {2, 0, 0, 0});
    EXPECT_NEAR(exposed[0], (110 + 2000 / 0.75) * 1e-6, 1e-12);
  }
  {
    // Deadline-first: both layers sent at the start, shard 0's disk reads
    // layer 0's 2 rows then layer 1's 3: layer 0 as above (2210 us),
    // layer 1 at 10 + 100 + 5000 + 10 us = 5120 us (the worker's link:
    // 160 us), needed at 500 + 2110 us: 2510 us exposed.
    o.workers = 1;
    o.fetch_order = FetchOrder::kDeadlineFirst;
    const FetchModel m(o, {1, 5}, {1000, 1000}, {0, 0});
    const double e = step(m, {100, 50, 10, 0}, {2, 0, 3, 0});
    EXPECT_NEAR(exposed[0], 2110e-6, 1e-12);
    EXPECT_NEAR(exposed[1], 2510e-6, 1e-12);
    EXPECT_NEAR(e, 4620e-6, 1e-12);
    // Layer 1 alone from disk: not behind layer 0's (which has none).
    step(m, {1, 0, 1, 0}, {0, 0, 3, 0});
    EXPECT_NEAR(exposed[1], (10 + 100 + 3000 + 1 - 500) * 1e-6, 1e-12);
  }
  EXPECT_FALSE(o.Validate(std::vector<int64_t>{1, 14}).ok());  // 10 blocks < 15
  o.blocks = 43;
  EXPECT_TRUE(o.Validate(std::vector<int64_t>{1, 14}).ok());
  o.disk_iops = 0;
  EXPECT_FALSE(o.Validate(std::vector<int64_t>{1, 14}).ok());
}

PlanModelOptions WindowModel() {
  PlanModelOptions m;
  m.disk_iops = 100000;
  m.tokens_per_second = 200;
  m.block_us = 100;  // short blocks: the first layer's window is tight
  m.blocks = 20;
  return m;
}

// The window search never predicts more wait than the frequency policy it
// replaces, and its placement replays to the plan it reports.
TEST(Placement, NeverWorseThanFrequency) {
  std::unique_ptr<TierReplay> replay = Replay();
  ASSERT_NE(replay, nullptr);
  const PlanModelOptions m = WindowModel();
  bool some_better = false;
  for (double pct : {5.0, 15.0, 30.0}) {
    const uint64_t budget = BudgetOfPercent(pct, replay->shard_bytes());
    absl::StatusOr<PlacementChoice> c = ChoosePlacement(*replay, budget, m);
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<BudgetReplay> f = replay->Run(budget);
    ASSERT_TRUE(f.ok());
    absl::StatusOr<BudgetPlan> fp = PlanBudget(*replay, *f, m);
    ASSERT_TRUE(fp.ok());
    EXPECT_LE(c->plan.exposed_wait_percent, fp->exposed_wait_percent) << pct;
    EXPECT_DOUBLE_EQ(c->frequency.exposed_wait_percent, fp->exposed_wait_percent);
    if (c->plan.exposed_wait_percent < fp->exposed_wait_percent - 1e-6) some_better = true;
    absl::StatusOr<BudgetReplay> again = replay->Run(budget, c->placement);
    ASSERT_TRUE(again.ok());
    absl::StatusOr<BudgetPlan> p = PlanBudget(*replay, *again, m);
    ASSERT_TRUE(p.ok());
    EXPECT_DOUBLE_EQ(p->exposed_wait_percent, c->plan.exposed_wait_percent);
    EXPECT_GT(c->evaluated, 20);
    // The bound of the chosen placement is below its prediction.
    EXPECT_LE(IdealExposedWaitPercent(*replay, *again, m.disk_iops, m.disk_latency_us, m.block_us,
                                      m.blocks),
              c->plan.exposed_wait_percent + 1e-12);
  }
  EXPECT_TRUE(some_better);
}

// The ideal bound is at most either model's prediction for any placement,
// and zero with nothing read from disk.
TEST(Placement, IdealBoundIsBelowTheModel) {
  std::unique_ptr<TierReplay> replay = Replay();
  ASSERT_NE(replay, nullptr);
  PlanModelOptions m = WindowModel();
  const uint64_t budget = BudgetOfPercent(10, replay->shard_bytes());
  for (const TierPlacement& placement :
       {TierPlacement{20, {}}, TierPlacement{0, {0.8, 0.2}}, TierPlacement{10, {0.3, 0.7}}}) {
    absl::StatusOr<BudgetReplay> r = replay->Run(budget, placement);
    ASSERT_TRUE(r.ok()) << r.status();
    const double bound =
        IdealExposedWaitPercent(*replay, *r, m.disk_iops, m.disk_latency_us, m.block_us, m.blocks);
    EXPECT_GT(bound, 0);
    for (FetchOrder order : {FetchOrder::kDeadlineFirst, FetchOrder::kSequential}) {
      m.fetch_order = order;
      absl::StatusOr<BudgetPlan> p = PlanBudget(*replay, *r, m);
      ASSERT_TRUE(p.ok());
      EXPECT_LE(bound, p->exposed_wait_percent + 1e-12) << FetchOrderName(order);
    }
  }
  absl::StatusOr<BudgetReplay> whole = replay->Run(replay->shard_bytes());
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(IdealExposedWaitPercent(*replay, *whole, 1000, 80, 100, 20), 0.0);
}

// Layer shares are what the replay pins: a share of 1 for one layer keeps
// the other's rows off the pinned set (all its hits are the cache's).
TEST(Placement, SharesRespected) {
  std::unique_ptr<TierReplay> replay = Replay();
  ASSERT_NE(replay, nullptr);
  const uint64_t budget = BudgetOfPercent(10, replay->shard_bytes());
  for (int layer : {0, 1}) {
    std::vector<double> shares(2, 0.0);
    shares[layer] = 1;
    absl::StatusOr<BudgetReplay> r = replay->Run(budget, {0, shares});
    ASSERT_TRUE(r.ok()) << r.status();
    uint64_t pinned[2] = {0, 0};
    for (const ShardReplay& s : r->shards) {
      for (int l = 0; l < 2; ++l) pinned[l] += s.layers[l].pinned;
    }
    EXPECT_GT(pinned[layer], 0u);
    EXPECT_EQ(pinned[1 - layer], 0u);  // the profile holds more than the budget of each layer
  }
  EXPECT_EQ(replay->Run(budget, {0, {0.7, 0.7}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(replay->Run(budget, {0, {1.0}}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Placement, TargetBudgetIsTheSmallestMeetingIt) {
  std::unique_ptr<TierReplay> replay = Replay();
  ASSERT_NE(replay, nullptr);
  const PlanModelOptions m = WindowModel();
  PlacementSearchOptions search;
  search.share_step = 0.25;  // fewer replays: the test is of the bisection
  search.cache_share_percents = {0};
  absl::StatusOr<TargetBudget> t =
      SmallestBudgetForTarget(*replay, 1.0, PlacementPolicy::kWindow, m, search, 5);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->found);
  EXPECT_LE(t->choice.plan.exposed_wait_percent, 1.0);
  EXPECT_EQ(t->bytes, BudgetOfPercent(t->percent, replay->shard_bytes()));
  if (t->percent >= 5) {
    absl::StatusOr<PlacementChoice> below =
        ChoosePlacement(*replay, BudgetOfPercent(t->percent - 5, replay->shard_bytes()), m, search);
    ASSERT_TRUE(below.ok());
    EXPECT_GT(below->plan.exposed_wait_percent, 1.0);
  }
  EXPECT_LT(t->budgets_evaluated, 10);  // bisection of 21 budgets
  absl::StatusOr<TargetBudget> never =
      SmallestBudgetForTarget(*replay, -1, PlacementPolicy::kFrequency, m, search, 5);
  ASSERT_TRUE(never.ok());
  EXPECT_FALSE(never->found);
}

// FitTailReads recovers the latency and rate that made a run's fetch
// times from its replayed tail rows, whatever the fetches without a tail
// or a few stalled ones took.
TEST(TailReadFit, RecoversTheModelThatTimedTheFetches) {
  std::unique_ptr<TierReplay> replay = Replay();
  ASSERT_NE(replay, nullptr);
  absl::StatusOr<BudgetReplay> r = replay->Run(BudgetOfPercent(25, replay->shard_bytes()));
  ASSERT_TRUE(r.ok()) << r.status();
  const size_t L = 2, K = 3;
  ASSERT_EQ(static_cast<size_t>(replay->n_layers()), L);
  constexpr double kRtt = 300, kLatency = 700, kIops = 20000;
  std::vector<std::vector<double>> fetch(L, std::vector<double>(replay->steps()));
  size_t with_tail = 0, stalled = 0;
  for (size_t l = 0; l < L; ++l) {
    for (size_t step = 0; step < replay->steps(); ++step) {
      const uint32_t* tail = r->step_tail.data() + (step * L + l) * K;
      const uint32_t t = std::max({tail[0], tail[1], tail[2]});
      if (t == 0) {
        fetch[l][step] = 1e9;  // no tail: not the fit's
        continue;
      }
      fetch[l][step] = kRtt + kLatency + 1e6 * t / kIops;
      if (++with_tail % 10 == 0) {
        fetch[l][step] += 50000;  // the device stalled
        ++stalled;
      }
    }
  }
  ASSERT_GT(stalled, 0u);
  absl::StatusOr<TailReadFit> fit = FitTailReads(*replay, *r, fetch, kRtt);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->fetches, with_tail);
  EXPECT_NEAR(fit->latency_us, kLatency, 1e-6);
  EXPECT_NEAR(fit->iops, kIops, 1e-6);
  // A prefix of the steps is a shorter run of the same replay.
  std::vector<std::vector<double>> prefix = fetch;
  for (std::vector<double>& f : prefix) f.resize(f.size() / 2);
  fit = FitTailReads(*replay, *r, prefix, kRtt);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->iops, kIops, 1e-6);
}

TEST(TailReadFit, WhatCannotBeFittedIsAClearError) {
  std::unique_ptr<TierReplay> replay = Replay();
  ASSERT_NE(replay, nullptr);
  absl::StatusOr<BudgetReplay> r = replay->Run(BudgetOfPercent(25, replay->shard_bytes()));
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<std::vector<double>> flat(2, std::vector<double>(replay->steps(), 900));
  absl::StatusOr<TailReadFit> fit = FitTailReads(*replay, *r, flat, 300);
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(fit.status().message().find("do not grow"), std::string::npos) << fit.status();
  fit = FitTailReads(*replay, *r, {flat[0]}, 300);  // one layer of two
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<std::vector<double>> ragged = flat;
  ragged[1].pop_back();
  EXPECT_EQ(FitTailReads(*replay, *r, ragged, 300).status().code(),
            absl::StatusCode::kInvalidArgument);
  fit = FitTailReads(*replay, *r, flat, 300, /*min_fetches=*/1000000);
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(fit.status().message().find("fetches read the tail"), std::string::npos);
  absl::StatusOr<BudgetReplay> whole = replay->Run(replay->shard_bytes());
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(FitTailReads(*replay, *whole, flat, 300).status().code(),
            absl::StatusCode::kInvalidArgument);  // nothing read from disk
}

}  // namespace
}  // namespace engram
