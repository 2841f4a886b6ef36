#include "tools/plan_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/util/flags.h"
#include "nlohmann/json.hpp"
#include "shard/plan/placement.h"
#include "shard/plan/tier_plan.h"
#include "shard/plan/tier_replay.h"
#include "shard/shard_format.h"
#include "tools/plan_png.h"

ABSL_DECLARE_FLAG(std::string, table);
ABSL_DECLARE_FLAG(std::string, shards);
ABSL_DECLARE_FLAG(std::string, profile_trace);
ABSL_DECLARE_FLAG(bool, json);

// plan defaults are PlanModelOptions' and TierReplayOptions' (shard/plan/tier_plan.h).
static const engram::PlanModelOptions kModelDefaults;
static const engram::TierReplayOptions kReplayDefaults;

// Numbers are string flags, parsed here, so a bad value is one line and
// exit 2 like every other refusal of plan.
ABSL_FLAG(std::string, trace, "", "plan: the workload, a token trace (tools/make-trace)");
ABSL_FLAG(std::string, disk_iops, "",
          "plan: random 4 KiB reads per second one shard's disk sustains at depth (required)");
ABSL_FLAG(std::string, disk_latency_us, absl::StrCat(kModelDefaults.disk_latency_us),
          "plan: microseconds of one disk read at depth 1");
ABSL_FLAG(std::string, network_gbps, absl::StrCat(kModelDefaults.network_gbps),
          "plan: Gbit/s of every link (each shard's, each worker's)");
ABSL_FLAG(std::string, rtt_us, absl::StrCat(kModelDefaults.rtt_us),
          "plan: microseconds of a request's round trip without its data");
ABSL_FLAG(std::string, block_us, absl::StrCat(kModelDefaults.block_us),
          "plan: microseconds of one transformer block");
ABSL_FLAG(std::string, blocks, absl::StrCat(kModelDefaults.blocks),
          "plan: transformer blocks of the model (V4.1-Flash: 43)");
ABSL_FLAG(std::string, tokens_per_second, absl::StrCat(kModelDefaults.tokens_per_second),
          "plan: tokens per second of one worker; 0 = decoding back to back "
          "(batch / (blocks x block-us))");
ABSL_FLAG(std::string, workers, absl::StrCat(kModelDefaults.workers),
          "plan: inference workers sharing the shards");
ABSL_FLAG(std::string, batch, absl::StrCat(kReplayDefaults.batch),
          "plan: sequences per decode step (trace lines decoded in lockstep)");
ABSL_FLAG(std::string, budgets, "1%,2%,5%,10%,25%,50%,100%",
          "plan: RAM budgets per shard to replay: sizes (64M, 1G) or % of a shard's rows");
ABSL_FLAG(std::string, ram_per_shard, "", "plan: RAM a shard can give; larger budgets are dropped");
ABSL_FLAG(std::string, fixed_bytes, "",
          "plan: each shard's fixed bytes, charged before the hot tier (`engramctl footprint`'s "
          "fixed_bytes); default: an estimate of RocksDB's index of a block tail");
ABSL_FLAG(std::string, target_exposed_wait, "",
          "plan: the verdict names the smallest of --budgets whose predicted exposed wait is at "
          "most this (default 1%); given, plan also searches every whole percent of a shard for "
          "the smallest budget meeting it (budget_for_target)");
ABSL_FLAG(std::string, policy, "window",
          "plan: hot-tier placement: window (layer shares and cache share chosen per budget for "
          "the least exposed wait) or frequency (engram-shard without a tier_plan.json)");
ABSL_FLAG(std::string, fetch_order, "sequential",
          "plan: sequential (a layer sent once the one before arrived: the client's default, "
          "pipeline_layers) or deadline (every layer sent at Prefetch, tail rows read in need "
          "order: pipeline_layers off)");
ABSL_FLAG(std::string, write_tier_plan, "",
          "plan: shard directories (comma-separated) to write tier_plan.json into, for "
          "budget_for_target (with --target-exposed-wait) or the single budget of --budgets");
ABSL_FLAG(std::string, png, "", "plan: also plot hit ratio and exposed wait to this PNG (gnuplot)");

namespace engram {
namespace {

int Fail(const std::string& line) {
  std::fprintf(stderr, "engramctl plan: %s\n", line.c_str());
  return 2;
}

// A finite number >= min (> min when `strict`), or a one-line reason.
absl::StatusOr<double> Number(const char* flag, const std::string& text, double min, bool strict,
                              const char* meaning) {
  double v = 0;
  if (!absl::SimpleAtod(text, &v) || !std::isfinite(v) || (strict ? v <= min : v < min)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", text.empty() ? "\"\"" : text,
                                                   ": want a number ", strict ? "> " : ">= ", min,
                                                   " (", meaning, ")"));
  }
  return v;
}

absl::StatusOr<int> Count(const char* flag, const std::string& text, const char* meaning) {
  int v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", text.empty() ? "\"\"" : text,
                                                   ": want a whole number >= 1 (", meaning, ")"));
  }
  return v;
}

// The exact byte count in a form ParseByteSize (engram-shard --ram-budget)
// takes: the largest binary suffix that divides it.
std::string SizeText(uint64_t bytes) {
  const char* units = "KMGT";
  for (int i = 3; i >= 0 && bytes > 0; --i) {
    const uint64_t unit = uint64_t{1} << (10 * (i + 1));
    if (bytes % unit == 0) return absl::StrCat(bytes / unit, std::string(1, units[i]));
  }
  return absl::StrCat(bytes);
}

std::string Human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  return absl::StrFormat(u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
}

std::string Pct(double p) { return absl::StrFormat("%.4g", p); }

// --budgets: sizes or percentages of shard_bytes, ascending, without
// repeats. A percentage is rounded to whole MiB (KiB below 64 MiB, bytes
// below 64 KiB) so the size printed is the size replayed; 100% is the
// shard's exact size.
absl::StatusOr<std::vector<uint64_t>> ParseBudgets(const std::string& text, uint64_t shard_bytes) {
  std::vector<uint64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const std::string item(absl::StripAsciiWhitespace(part));
    uint64_t bytes = 0;
    if (!item.empty() && item.back() == '%') {
      double p = 0;
      if (!absl::SimpleAtod(item.substr(0, item.size() - 1), &p) || !(p >= 0) || p > 100) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--budgets: \"", item, "\" is not a percentage of a shard in 0%..100% (e.g. 5%)"));
      }
      bytes = BudgetOfPercent(p, shard_bytes);
    } else {
      absl::StatusOr<uint64_t> size = ParseByteSize(item);
      if (!size.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--budgets: \"", item, "\" is neither a size (64M, 1G) nor a % of a shard"));
      }
      bytes = *size;
      if (bytes > shard_bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("--budgets: ", item, " is larger than a shard of this table (",
                         SizeText(shard_bytes), " = ", Human(static_cast<double>(shard_bytes)),
                         " holds every row): give at most that, or 100%"));
      }
    }
    out.push_back(bytes);
  }
  if (out.empty()) return absl::InvalidArgumentError("--budgets is empty: give e.g. 1%,5%,64M");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string WaitText(const BudgetPlan& p) {
  return p.disk_saturated ? std::string("saturated")
                          : absl::StrFormat("%.3f%%", p.exposed_wait_percent);
}

// "policy=window cache_share=20% layer_pin=70%,30% exposed_wait=0.812%".
std::string PlacementText(const PlacementChoice& c) {
  const TierPlacement& p = c.placement;
  std::string text = absl::StrCat("policy=", p.layer_pin_shares.empty() ? "frequency" : "window",
                                  " cache_share=", p.cache_share_percent, "%");
  if (!p.layer_pin_shares.empty()) {
    std::vector<std::string> parts;
    for (double share : p.layer_pin_shares) parts.push_back(absl::StrCat(Pct(100 * share), "%"));
    absl::StrAppend(&text, " layer_pin=", absl::StrJoin(parts, ","));
  }
  absl::StrAppend(&text, " exposed_wait=", WaitText(c.plan));
  return text;
}

nlohmann::json PlacementJson(const PlacementChoice& c) {
  std::vector<double> percent;
  for (double share : c.placement.layer_pin_shares) percent.push_back(100 * share);
  return {{"policy", c.placement.layer_pin_shares.empty() ? "frequency" : "window"},
          {"cache_share_percent", c.placement.cache_share_percent},
          {"layer_pin_percent", percent}};
}

// --fixed-bytes' default: RocksDB's index of shard 0's block tail. A
// 4 KiB block holds whole rows of one layer, each with its 8-byte key and a
// few bytes of entry header; the index keeps one entry per block (its last
// key, handle and restart point). kIndexBytesPerBlock is fitted to
// `engramctl footprint` of imported shards (docs/operating.md, "Sizing").
uint64_t EstimatedFixedBytes(const TableManifest& manifest, uint32_t n_shards) {
  constexpr double kIndexBytesPerBlock = 20;
  constexpr double kRowOverheadBytes = 12;
  double bytes = 0;
  for (const LayerInfo& l : manifest.layers) {
    const double rows = std::ceil(static_cast<double>(l.rows) / std::max<uint32_t>(1, n_shards));
    const double per_block = std::max(1.0, std::floor(4096.0 / (l.row_bytes + kRowOverheadBytes)));
    bytes += std::ceil(rows / per_block) * kIndexBytesPerBlock;
  }
  return static_cast<uint64_t>(bytes);
}

}  // namespace

int PlanCommand(const std::vector<std::string>& args) {
  if (!args.empty()) return Fail(absl::StrCat("plan takes flags only, not '", args[0], "'"));
  TierReplayOptions ro;
  ro.trace_path = absl::GetFlag(FLAGS_trace);
  ro.table_dir = absl::GetFlag(FLAGS_table);
  ro.profile_trace_path = absl::GetFlag(FLAGS_profile_trace);
  if (ro.trace_path.empty()) {
    return Fail("needs --trace FILE, the workload: a token trace (tools/make-trace --out FILE)");
  }
  if (ro.table_dir.empty()) {
    return Fail("needs --table DIR, the table directory (only its manifest.json is read)");
  }
  for (const auto& [flag, path] :
       {std::pair{"--trace", ro.trace_path}, std::pair{"--profile-trace", ro.profile_trace_path}}) {
    if (path.empty()) continue;
    std::ifstream probe(path);
    if (!probe || std::filesystem::is_directory(path)) {
      return Fail(absl::StrCat(flag, " ", path, ": cannot read it; give a token trace file"));
    }
  }
  {
    int k = 0;
    const std::string shards = absl::GetFlag(FLAGS_shards);
    if (!absl::SimpleAtoi(shards, &k) || k < 1) {
      return Fail(absl::StrCat("--shards ", shards.empty() ? "\"\"" : shards,
                               ": want the number of shard servers K >= 1"));
    }
    ro.n_shards = static_cast<uint32_t>(k);
  }
  PlanModelOptions mo;
  std::vector<absl::Status> parsed;
  auto number = [&](double* out, const char* flag, const std::string& text, double min, bool strict,
                    const char* meaning) {
    absl::StatusOr<double> v = Number(flag, text, min, strict, meaning);
    if (v.ok()) *out = *v;
    parsed.push_back(v.status());
  };
  auto count = [&](int* out, const char* flag, const std::string& text, const char* meaning) {
    absl::StatusOr<int> v = Count(flag, text, meaning);
    if (v.ok()) *out = *v;
    parsed.push_back(v.status());
  };
  const std::string iops = absl::GetFlag(FLAGS_disk_iops);
  if (iops.empty()) {
    return Fail(
        "needs --disk-iops N, the random 4 KiB reads per second a shard's disk sustains "
        "(e.g. 1000000 for a datacenter NVMe)");
  }
  number(&mo.disk_iops, "disk-iops", iops, 0, true, "reads per second");
  number(&mo.disk_latency_us, "disk-latency-us", absl::GetFlag(FLAGS_disk_latency_us), 0, false,
         "microseconds");
  number(&mo.network_gbps, "network-gbps", absl::GetFlag(FLAGS_network_gbps), 0, true, "Gbit/s");
  number(&mo.rtt_us, "rtt-us", absl::GetFlag(FLAGS_rtt_us), 0, false, "microseconds");
  number(&mo.block_us, "block-us", absl::GetFlag(FLAGS_block_us), 0, true, "microseconds");
  number(&mo.tokens_per_second, "tokens-per-second", absl::GetFlag(FLAGS_tokens_per_second), 0,
         false, "per worker; 0 = back to back");
  count(&mo.blocks, "blocks", absl::GetFlag(FLAGS_blocks), "transformer blocks");
  count(&mo.workers, "workers", absl::GetFlag(FLAGS_workers), "inference workers");
  count(&ro.batch, "batch", absl::GetFlag(FLAGS_batch), "sequences per decode step");
  double target = 1;
  const bool search_target = !absl::GetFlag(FLAGS_target_exposed_wait).empty();
  if (search_target) {
    std::string t = absl::GetFlag(FLAGS_target_exposed_wait);
    if (!t.empty() && t.back() == '%') t.pop_back();
    number(&target, "target-exposed-wait", t, 0, false, "percent of step time, e.g. 1%");
  }
  for (const absl::Status& s : parsed) {
    if (!s.ok()) return Fail(std::string(s.message()));
  }
  const absl::StatusOr<PlacementPolicy> policy = ParsePlacementPolicy(absl::GetFlag(FLAGS_policy));
  if (!policy.ok()) {
    return Fail(absl::StrCat("--policy ", absl::GetFlag(FLAGS_policy),
                             ": want window (placement chosen per budget) or frequency"));
  }
  if (absl::StatusOr<FetchOrder> order = ParseFetchOrder(absl::GetFlag(FLAGS_fetch_order));
      order.ok()) {
    mo.fetch_order = *order;
  } else {
    return Fail(absl::StrCat("--fetch-order ", absl::GetFlag(FLAGS_fetch_order),
                             ": want sequential (pipeline_layers) or deadline "
                             "(every layer at Prefetch)"));
  }
  std::vector<std::string> plan_dirs;
  for (absl::string_view d :
       absl::StrSplit(absl::GetFlag(FLAGS_write_tier_plan), ',', absl::SkipWhitespace())) {
    plan_dirs.emplace_back(absl::StripAsciiWhitespace(d));
  }

  absl::StatusOr<TableManifest> manifest = TableManifest::Load(ro.table_dir);
  if (!manifest.ok()) {
    return Fail(absl::StrCat("--table ", ro.table_dir, ": ", manifest.status().message()));
  }
  if (absl::Status s = mo.Validate(manifest->layout.engram_layer_ids); !s.ok()) {
    // Validate names the field first: the flag is its dashed name.
    const std::string m(s.message());
    const size_t space = std::min(m.find(' '), m.size());
    return Fail(
        absl::StrCat("--", absl::StrReplaceAll(m.substr(0, space), {{"_", "-"}}), m.substr(space)));
  }
  if (const std::string fixed = absl::GetFlag(FLAGS_fixed_bytes); !fixed.empty()) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(fixed);
    if (!bytes.ok()) return Fail(absl::StrCat("--fixed-bytes: ", bytes.status().message()));
    ro.fixed_bytes = *bytes;
  } else {
    ro.fixed_bytes = EstimatedFixedBytes(*manifest, ro.n_shards);
  }
  absl::StatusOr<std::unique_ptr<TierReplay>> replay = TierReplay::Create(ro);
  if (!replay.ok()) return Fail(std::string(replay.status().message()));
  const TierReplay& rp = **replay;
  const uint64_t shard_bytes = rp.shard_bytes();
  absl::StatusOr<std::vector<uint64_t>> budgets =
      ParseBudgets(absl::GetFlag(FLAGS_budgets), shard_bytes);
  if (!budgets.ok()) return Fail(std::string(budgets.status().message()));
  if (budgets->front() < ro.fixed_bytes) {
    return Fail(absl::StrCat("--budgets: ", SizeText(budgets->front()),
                             " is below a shard's fixed ", SizeText(ro.fixed_bytes),
                             " (RocksDB's index, --fixed-bytes): give budgets of at least that"));
  }
  if (const std::string cap_text = absl::GetFlag(FLAGS_ram_per_shard); !cap_text.empty()) {
    absl::StatusOr<uint64_t> cap = ParseByteSize(cap_text);
    if (!cap.ok()) return Fail(absl::StrCat("--ram-per-shard: ", cap.status().message()));
    std::erase_if(*budgets, [&](uint64_t b) { return b > *cap; });
    if (budgets->empty()) {
      return Fail(absl::StrCat("no budget of --budgets is at most --ram-per-shard ", cap_text,
                               "; give smaller budgets"));
    }
  }
  if (!plan_dirs.empty()) {
    if (!search_target && budgets->size() != 1) {
      return Fail(
          "--write-tier-plan needs the budget to plan for: --target-exposed-wait P% (the "
          "smallest budget meeting it) or a single --budgets SIZE");
    }
    for (const std::string& dir : plan_dirs) {
      absl::StatusOr<ShardInfo> info = ShardInfo::Load(absl::StrCat(dir, "/", kShardInfoFile));
      if (!info.ok() || info->layers.size() != static_cast<size_t>(rp.n_layers())) {
        return Fail(absl::StrCat("--write-tier-plan: ", dir, " is not a shard directory of a ",
                                 rp.n_layers(), "-layer table (",
                                 info.ok() ? "other layers" : info.status().message(),
                                 "); give the shard directories engramctl import wrote"));
      }
    }
  }
  std::vector<PlacementChoice> choices;
  std::vector<BudgetPlan> plans_list;
  for (uint64_t b : *budgets) {
    absl::StatusOr<PlacementChoice> c = PlanPlacement(rp, b, *policy, mo);
    if (!c.ok()) return Fail(std::string(c.status().message()));
    plans_list.push_back(c->plan);
    choices.push_back(*std::move(c));
  }
  std::optional<TargetBudget> for_target;
  if (search_target) {
    absl::StatusOr<TargetBudget> t = SmallestBudgetForTarget(rp, target, *policy, mo);
    if (!t.ok()) return Fail(std::string(t.status().message()));
    for_target = *std::move(t);
  }
  const PlacementChoice* to_write = nullptr;
  uint64_t write_bytes = 0;
  if (!plan_dirs.empty()) {
    if (for_target.has_value()) {
      if (!for_target->found) {
        std::fprintf(stderr,
                     "engramctl plan: --write-tier-plan: no budget up to a whole shard meets "
                     "exposed wait <= %s%%; nothing written\n",
                     Pct(target).c_str());
        return 1;
      }
      to_write = &for_target->choice;
      write_bytes = for_target->bytes;
    } else {
      to_write = &choices.front();
      write_bytes = budgets->front();
    }
  }
  std::vector<std::string> written;
  if (to_write != nullptr) {
    const TierPlanFile file = TierPlanOf(
        to_write->placement, write_bytes,
        to_write->plan.disk_saturated ? std::nullopt
                                      : std::optional<double>(to_write->plan.exposed_wait_percent));
    for (const std::string& dir : plan_dirs) {
      const std::string path = absl::StrCat(dir, "/", kTierPlanFile);
      if (absl::Status s = file.Save(path); !s.ok()) {
        std::fprintf(stderr, "engramctl plan: --write-tier-plan: %s\n",
                     std::string(s.message()).c_str());
        return 1;
      }
      written.push_back(path);
    }
  }
  const TrafficPlan traffic = PlanTraffic(rp, mo);
  const BudgetPlan* best = nullptr;
  for (const BudgetPlan& p : plans_list) {
    if (!p.disk_saturated && p.exposed_wait_percent <= target) {
      best = &p;
      break;
    }
  }
  const std::string target_text = absl::StrCat(Pct(target), "%");
  const std::string verdict =
      best != nullptr
          ? absl::StrCat("plan: smallest budget meeting exposed wait <= ", target_text, ": ",
                         SizeText(best->budget_bytes), " per shard (", Pct(best->percent_of_shard),
                         "% of a shard)")
          : absl::StrCat("plan: no budget up to ", SizeText(plans_list.back().budget_bytes),
                         " meets exposed wait <= ", target_text);
  const HashLayout& layout = rp.manifest().layout;
  const uint32_t K = rp.map().n_shards;

  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json j;
    j["inputs"] = {{"trace", ro.trace_path},
                   {"profile_trace", ro.profile_trace_path},
                   {"table", ro.table_dir},
                   {"shards", K},
                   {"batch", ro.batch},
                   {"sequences", rp.sequences()},
                   {"tokens", rp.tokens()},
                   {"steps", rp.steps()},
                   {"shard_rows", rp.shard_rows(0)},
                   {"shard_bytes", shard_bytes},
                   {"fixed_bytes", ro.fixed_bytes},
                   {"engram_layer_blocks", layout.engram_layer_ids}};
    j["model"] = {{"disk_iops", mo.disk_iops},
                  {"disk_latency_us", mo.disk_latency_us},
                  {"network_gbps", mo.network_gbps},
                  {"rtt_us", mo.rtt_us},
                  {"block_us", mo.block_us},
                  {"blocks", mo.blocks},
                  {"workers", mo.workers},
                  {"tokens_per_second", traffic.tokens_per_second},
                  {"steps_per_second", traffic.steps_per_second},
                  {"max_shard_link_utilization", traffic.max_shard_link_utilization},
                  {"worker_link_utilization", traffic.worker_link_utilization}};
    j["budgets"] = nlohmann::json::array();
    for (const BudgetPlan& p : plans_list) {
      nlohmann::json b = {{"bytes", p.budget_bytes},
                          {"size", SizeText(p.budget_bytes)},
                          {"percent_of_shard", p.percent_of_shard},
                          {"hit_ratio", p.hit_ratio},
                          {"max_tail_rows_per_second", p.max_tail_rows_per_second},
                          {"max_disk_utilization", p.max_disk_utilization},
                          {"disk_saturated", p.disk_saturated}};
      b["exposed_wait_percent"] =
          p.disk_saturated ? nlohmann::json(nullptr) : nlohmann::json(p.exposed_wait_percent);
      b["layer_exposed_wait_percent"] =
          p.disk_saturated ? nlohmann::json(nullptr) : nlohmann::json(p.layer_exposed_wait_percent);
      b["shards"] = nlohmann::json::array();
      for (const ShardPlan& s : p.shards) {
        b["shards"].push_back({{"pinned", s.rows.pinned},
                               {"cached", s.rows.cached},
                               {"disk", s.rows.disk},
                               {"hit_ratio", s.hit_ratio},
                               {"tail_rows_per_step", s.tail_rows_per_step},
                               {"tail_rows_per_second", s.tail_rows_per_second},
                               {"disk_utilization", s.disk_utilization},
                               {"pinned_rows", s.pinned_rows},
                               {"cache_slots", s.cache_slots}});
      }
      j["budgets"].push_back(std::move(b));
    }
    for (size_t i = 0; i < choices.size(); ++i) {
      j["budgets"][i]["placement"] = PlacementJson(choices[i]);
      const BudgetPlan& f = choices[i].frequency;
      j["budgets"][i]["frequency_exposed_wait_percent"] =
          f.disk_saturated ? nlohmann::json(nullptr) : nlohmann::json(f.exposed_wait_percent);
    }
    j["policy"] = PlacementPolicyName(*policy);
    j["fetch_order"] = FetchOrderName(mo.fetch_order);
    if (for_target.has_value()) {
      j["budget_for_target"] =
          !for_target->found ? nlohmann::json(nullptr)
                             : nlohmann::json({{"percent_of_shard", for_target->percent},
                                               {"bytes", for_target->bytes},
                                               {"size", SizeText(for_target->bytes)},
                                               {"exposed_wait_percent",
                                                for_target->choice.plan.exposed_wait_percent},
                                               {"placement", PlacementJson(for_target->choice)}});
    }
    j["tier_plans_written"] = written;
    j["target_exposed_wait_percent"] = target;
    j["smallest_budget"] = best == nullptr
                               ? nlohmann::json(nullptr)
                               : nlohmann::json({{"bytes", best->budget_bytes},
                                                 {"size", SizeText(best->budget_bytes)},
                                                 {"percent_of_shard", best->percent_of_shard}});
    j["verdict"] = verdict;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("plan: workload %s: %llu sequences, %llu tokens, %llu decode steps of batch %d\n",
                ro.trace_path.c_str(), static_cast<unsigned long long>(rp.sequences()),
                static_cast<unsigned long long>(rp.tokens()),
                static_cast<unsigned long long>(rp.steps()), ro.batch);
    if (ro.profile_trace_path.empty()) {
      std::printf(
          "plan: no profile trace: below a whole shard the budget is all admission cache\n");
    } else {
      uint64_t lo = rp.profile_rows(0), hi = lo;
      for (uint32_t s = 0; s < K; ++s) {
        lo = std::min(lo, rp.profile_rows(s));
        hi = std::max(hi, rp.profile_rows(s));
      }
      const std::string split =
          *policy == PlacementPolicy::kWindow
              ? std::string(
                    "policy window: the layers' pinned shares and the admission "
                    "cache's share are chosen per budget")
              : absl::StrCat(ro.cache_share_percent, "% of a budget is admission cache");
      std::printf("plan: profile %s: %llu..%llu profiled rows a shard; %s\n",
                  ro.profile_trace_path.c_str(), static_cast<unsigned long long>(lo),
                  static_cast<unsigned long long>(hi), split.c_str());
    }
    std::vector<std::string> rows_text;
    for (const LayerInfo& l : rp.manifest().layers) rows_text.push_back(absl::StrCat(l.rows));
    std::printf(
        "plan: table %s (%s v%llu): rows %s of %d bytes; %u shards of %llu rows (%s, of which "
        "%s fixed)\n",
        ro.table_dir.c_str(), rp.map().table.c_str(),
        static_cast<unsigned long long>(rp.map().version), absl::StrJoin(rows_text, " + ").c_str(),
        rp.manifest().layers[0].row_bytes, K, static_cast<unsigned long long>(rp.shard_rows(0)),
        Human(static_cast<double>(shard_bytes)).c_str(),
        Human(static_cast<double>(ro.fixed_bytes)).c_str());
    std::printf(
        "plan: Engram layers needed at blocks %s of %d x %g us; %d worker(s) x %.0f "
        "tokens/s = %.1f steps/s\n",
        absl::StrJoin(layout.engram_layer_ids, ", ").c_str(), mo.blocks, mo.block_us, mo.workers,
        traffic.tokens_per_second, traffic.steps_per_second);
    double rows_max = 0;
    for (double r : traffic.rows_per_step) rows_max = std::max(rows_max, r);
    std::printf(
        "plan: hardware: disk %.0f IOPS, %g us a read; links %g Gb/s, rtt %g us; %.0f rows "
        "a step to the busiest shard, its link %.1f%% busy, a worker's %.1f%%\n",
        mo.disk_iops, mo.disk_latency_us, mo.network_gbps, mo.rtt_us, rows_max,
        100 * traffic.max_shard_link_utilization, 100 * traffic.worker_link_utilization);
    std::printf("%12s %9s %8s %14s %10s %14s\n", "budget", "% shard", "hit %", "tail rows/s",
                "disk util", "exposed wait");
    std::vector<std::string> saturated;
    for (const BudgetPlan& p : plans_list) {
      const std::string exposed = p.disk_saturated
                                      ? std::string("disk saturated")
                                      : absl::StrFormat("%.3f%%", p.exposed_wait_percent);
      std::printf("%12s %9s %8.2f %14.0f %9.1f%% %14s\n", SizeText(p.budget_bytes).c_str(),
                  Pct(p.percent_of_shard).c_str(), 100 * p.hit_ratio, p.max_tail_rows_per_second,
                  100 * p.max_disk_utilization, exposed.c_str());
      if (p.disk_saturated) saturated.push_back(SizeText(p.budget_bytes));
    }
    if (!saturated.empty()) {
      std::printf(
          "plan: the disk cannot keep up (utilisation >= 100%%) at %s: more RAM, more "
          "shards or a faster disk\n",
          absl::StrJoin(saturated, ", ").c_str());
    }
    if (*policy == PlacementPolicy::kWindow) {
      for (const PlacementChoice& c : choices) {
        std::printf("plan: placement %s: %s frequency_exposed_wait=%s\n",
                    SizeText(c.plan.budget_bytes).c_str(), PlacementText(c).c_str(),
                    WaitText(c.frequency).c_str());
      }
    }
    if (for_target.has_value()) {
      if (for_target->found) {
        std::printf("plan: budget_for_target=%s%% size=%s %s target=%s%%\n",
                    Pct(for_target->percent).c_str(), SizeText(for_target->bytes).c_str(),
                    PlacementText(for_target->choice).c_str(), Pct(target).c_str());
      } else {
        std::printf(
            "plan: budget_for_target=none policy=%s target=%s%%: not met by a whole shard\n",
            PlacementPolicyName(*policy), Pct(target).c_str());
      }
    }
    for (const std::string& path : written) std::printf("plan: wrote %s\n", path.c_str());
    std::printf("%s\n", verdict.c_str());
  }
  if (const std::string png = absl::GetFlag(FLAGS_png); !png.empty()) {
    if (absl::Status s = WritePlanPng(png, plans_list, target); !s.ok()) {
      std::fprintf(stderr, "engramctl plan: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace engram
