// The capacity planner alone: the replay of a trace through the hot tier's
// policy at the extremes, the plan's rates against the replay, and the
// fetch model on hand-computed steps. (Against real shard servers and
// through engramctl: tests/plan_test.cc.)
#include <cmath>
#include <memory>
#include <vector>

#include "common/testing/test_files.h"
#include "gtest/gtest.h"
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
  m.disk_iops = 1;  // far too slow for any tail
  plans = PlanBudgets(*replay, {0}, m);
  ASSERT_TRUE(plans.ok());
  EXPECT_TRUE((*plans)[0].disk_saturated);
  EXPECT_TRUE(std::isinf((*plans)[0].exposed_wait_percent));
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
  EXPECT_FALSE(o.Validate(std::vector<int64_t>{1, 14}).ok());  // 10 blocks < 15
  o.blocks = 43;
  EXPECT_TRUE(o.Validate(std::vector<int64_t>{1, 14}).ok());
  o.disk_iops = 0;
  EXPECT_FALSE(o.Validate(std::vector<int64_t>{1, 14}).ok());
}

}  // namespace
}  // namespace engram
