// engramctl plan --png: hit ratio and predicted exposed wait against the
// budget, drawn by gnuplot run as a child process.
#ifndef ENGRAM_TOOLS_PLAN_PNG_H_
#define ENGRAM_TOOLS_PLAN_PNG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "shard/plan/tier_plan.h"

namespace engram {

// Writes `png` (the plans in budget order, the target as a dashed line).
// FailedPrecondition when gnuplot cannot be run, Internal when it fails
// (its first line of output in the message).
absl::Status WritePlanPng(const std::string& png, const std::vector<BudgetPlan>& plans,
                          double target);

}  // namespace engram

#endif  // ENGRAM_TOOLS_PLAN_PNG_H_
