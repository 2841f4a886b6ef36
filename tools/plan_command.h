// engramctl plan: the capacity planner. For a token trace, the hit ratio,
// disk load and exposed wait each RAM budget per shard would give, from a
// replay of the trace through the shards' own hot-tier policy
// (shard/plan/tier_replay.h) and a stated hardware model (shard/plan/tier_plan.h).
//
//   plan --trace FILE --table DIR --shards K --disk-iops N
//        [--profile-trace FILE] [--batch B] [--budgets 1%,64M,...]
//        [--ram-per-shard SIZE] [--target-exposed-wait 1%] [--json] [--png FILE]
//        [--policy window|frequency] [--fetch-order sequential|deadline]
//        [--write-tier-plan DIR,...]
//        [hardware: --disk-latency-us --network-gbps --rtt-us --block-us
//         --blocks --tokens-per-second --workers]
//
// Prints a header naming the inputs, one line per budget, with --policy
// window one "plan: placement ..." line per budget (shard/plan/placement.h),
// with --target-exposed-wait "plan: budget_for_target=P% ...", a "plan:
// wrote DIR/tier_plan.json" line per --write-tier-plan directory, then
// "plan: smallest budget meeting exposed wait <= T%: SIZE per shard (P% of
// a shard)" or "plan: no budget up to SIZE meets exposed wait <= T%"; with
// --json one JSON document instead. Exit 0; 2 with one line on stderr
// ("engramctl plan: ...") for bad input; 1 when --png cannot be drawn or a
// tier plan cannot be written.
// docs/operating.md, "Planning the RAM budget: engramctl plan".
#ifndef ENGRAM_TOOLS_PLAN_COMMAND_H_
#define ENGRAM_TOOLS_PLAN_COMMAND_H_

#include <string>
#include <vector>

namespace engram {

int PlanCommand(const std::vector<std::string>& args);

}  // namespace engram

#endif  // ENGRAM_TOOLS_PLAN_COMMAND_H_
