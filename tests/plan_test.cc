// engramctl plan: the replay (shard/plan/tier_replay.h) against real shard
// servers driven by the real client library, and the engramctl binary's
// output and refusals. The planner's own tests: shard/plan/tier_plan_test.cc.
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/engram_client.h"
#include "common/format/hot_profile.h"
#include "common/testing/child_process.h"
#include "common/testing/test_files.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "service/shard_server.h"
#include "service/testing/server_test_util.h"
#include "shard/footprint.h"
#include "shard/import/importer.h"
#include "shard/plan/tier_plan.h"
#include "shard/plan/tier_replay.h"
#include "shard/shard_format.h"

namespace engram {
namespace {

constexpr uint32_t kShards = 3;
constexpr int kBatch = 4;

// A small table, imported into 3 shards with and without a hot-row
// profile, and the traces; once for the suite.
class World {
 public:
  static World& Get() {
    static World* w = new World();
    return *w;
  }
  std::string table() const { return dir_.Sub("table"); }
  std::string shard_dir(bool profiled, uint32_t s) const {
    return dir_.Sub(absl::StrCat(profiled ? "profiled-" : "plain-", s));
  }
  std::string work() const { return dir_.Sub("work.trace"); }
  std::string profile() const { return dir_.Sub("profile.trace"); }
  // Few distinct n-grams: a shard's distinct rows fit every lock shard of
  // a large admission cache.
  std::string narrow() const { return dir_.Sub("narrow.trace"); }
  std::string Sub(const std::string& name) const { return dir_.Sub(name); }

 private:
  World() {
    EXPECT_TRUE(testing::MakeSmallTable(table(), 2000, 7).ok());
    testing::WriteZipfTrace(work(), 1, 18, 20, 90, 400);
    testing::WriteZipfTrace(profile(), 2, 30, 20, 90, 400);
    testing::WriteZipfTrace(narrow(), 3, 10, 10, 40, 2);
    for (bool profiled : {true, false}) {
      for (uint32_t s = 0; s < kShards; ++s) {
        ImportOptions o;
        o.table_dir = table();
        o.n_shards = kShards;
        o.shard_index = s;
        o.out_dir = shard_dir(profiled, s);
        if (profiled) o.profile_trace = profile();
        absl::StatusOr<ImportResult> r = ImportShard(o, nullptr);
        EXPECT_TRUE(r.ok()) << r.status();
      }
    }
  }
  testing::TempDir dir_{"plan-test"};
};

// What the shards' metrics say they served: [shard][layer].
struct Measured {
  std::vector<std::vector<ReplayCounts>> tiers;
  uint64_t steps = 0;
  ClientStats client;
};

// One worker decodes `trace` through the client against 3 in-process
// shard servers whose hot tiers hold `budget` bytes of RAM each (each
// server's --ram-budget is that plus its own fixed bytes, checked through
// ShardServer::hot_tier_budget, so the tiers are the replay's, which runs
// with fixed_bytes 0): lines are sequences,
// kBatch slots decode one token each per step, a finished sequence's slot
// takes the next line. Every step is prefetched, then each layer waited
// for, before the next step.
Measured Drive(bool profiled, uint64_t budget, const std::string& trace) {
  Measured m;
  std::vector<std::unique_ptr<ShardServer>> servers;
  std::vector<std::vector<std::string>> addrs;
  for (uint32_t s = 0; s < kShards; ++s) {
    ShardServerOptions o;
    o.listen = "127.0.0.1:0";
    o.db_dir = World::Get().shard_dir(profiled, s);
    absl::StatusOr<ShardFootprint> footprint = MeasureShardFootprint(o.db_dir, o.direct_io);
    EXPECT_TRUE(footprint.ok()) << footprint.status();
    if (!footprint.ok()) return m;
    o.ram_budget_bytes = budget == 0 ? 0 : budget + footprint->fixed_bytes;
    o.metrics_port = 0;
    o.reader_threads = 1;
    o.gather_threads = 0;
    o.scrub_pinned_bytes_per_second = 0;
    o.scrub_disk_bytes_per_second = 0;
    absl::StatusOr<std::unique_ptr<ShardServer>> server = ShardServer::Start(o);
    // RocksDB's index estimate moves by a few bytes between opens, so the
    // server's own fixed bytes can differ from ours: start it again with
    // the difference made up until its tier holds exactly `budget`.
    for (int attempt = 0; budget != 0 && server.ok() && attempt < 8; ++attempt) {
      const uint64_t applied = (*server)->hot_tier_budget();
      if (applied == budget) break;
      server->reset();  // closes its store before the next open
      o.ram_budget_bytes = o.ram_budget_bytes + budget - applied;
      server = ShardServer::Start(o);
    }
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return m;
    if (budget != 0) {
      EXPECT_EQ((*server)->hot_tier_budget(), budget) << "shard " << s;
    }
    addrs.push_back({absl::StrCat("127.0.0.1:", (*server)->port())});
    servers.push_back(*std::move(server));
  }
  ClientOptions co;
  co.table_dir = World::Get().table();
  co.shard_map_path = World::Get().shard_dir(profiled, 0) + "/shard_map.json";
  co.shard_addresses = addrs;
  // No retries on a loaded machine: a second attempt would be served twice.
  co.rpc_deadline = absl::Seconds(60);
  co.step_deadline = absl::Seconds(120);
  absl::StatusOr<std::unique_ptr<EngramClient>> client = EngramClient::Create(co);
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return m;
  EngramClient& c = **client;
  absl::StatusOr<std::vector<std::vector<int64_t>>> lines =
      ReadTraceSequences(trace, c.layout().vocab_size);
  EXPECT_TRUE(lines.ok()) << lines.status();
  if (!lines.ok()) return m;

  std::vector<std::unique_ptr<Sequence>> seq(kBatch);
  std::vector<int> line(kBatch, -1);
  std::vector<int64_t> pos(kBatch, 0);
  size_t next = 0;
  std::vector<uint8_t> out;
  while (true) {
    std::vector<Sequence*> batch;
    std::vector<int64_t> starts, tokens;
    std::vector<int> slots;
    for (int b = 0; b < kBatch; ++b) {
      if (line[b] < 0 && next < lines->size()) {
        line[b] = static_cast<int>(next++);
        pos[b] = 0;
        seq[b] = c.NewSequence();
      }
      if (line[b] < 0) continue;
      batch.push_back(seq[b].get());
      starts.push_back(pos[b]);
      tokens.push_back((*lines)[line[b]][pos[b]]);
      slots.push_back(b);
    }
    if (batch.empty()) break;
    absl::StatusOr<Step> step = c.Prefetch({batch, starts, 1, tokens, {}});
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) return m;
    for (int l = 0; l < c.n_layers(); ++l) {
      out.resize(batch.size() * c.n_cols() * c.OutputRowBytes(l, RowFormat::kRaw));
      const absl::Status s = step->Wait(l, RowFormat::kRaw, out);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) return m;
    }
    ++m.steps;
    for (int b : slots) {
      if (++pos[b] == static_cast<int64_t>((*lines)[line[b]].size())) line[b] = -1;
    }
  }
  m.client = c.stats();
  for (uint32_t s = 0; s < kShards; ++s) {
    absl::StatusOr<std::string> page = testing::HttpGet(servers[s]->metrics_port(), "/metrics");
    EXPECT_TRUE(page.ok()) << page.status();
    m.tiers.emplace_back(static_cast<size_t>(c.n_layers()));
    for (int l = 0; l < c.n_layers(); ++l) {
      auto value = [&](const char* tier) {
        const std::optional<double> v = testing::MetricValue(
            page.ok() ? *page : "",
            absl::StrCat("engram_shard_rows_total{layer=\"", l, "\",tier=\"", tier, "\"}"));
        return v.has_value() ? static_cast<uint64_t>(*v) : uint64_t{0};
      };
      m.tiers[s][l] = {value("pinned"), value("cached"), value("disk")};
    }
    servers[s]->Shutdown(absl::Seconds(5));
  }
  return m;
}

std::unique_ptr<TierReplay> Replay(bool profiled, const std::string& trace) {
  TierReplayOptions o;
  o.table_dir = World::Get().table();
  o.n_shards = kShards;
  o.trace_path = trace;
  if (profiled) o.profile_trace_path = World::Get().profile();
  o.batch = kBatch;
  absl::StatusOr<std::unique_ptr<TierReplay>> r = TierReplay::Create(o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : nullptr;
}

struct ReplayCase {
  const char* name;
  bool profiled;
  double share;  // of a shard's bytes
  bool narrow;   // the narrow trace
  bool expect_never_full;
};

void PrintTo(const ReplayCase& c, std::ostream* os) { *os << c.name; }

class ReplayVsServers : public ::testing::TestWithParam<ReplayCase> {};

// Each shard sees one request at a time, in the replay's order: the
// client sends a step's layer l + 1 only once every shard has answered
// layer l (pipeline_layers), the next step only after Wait of the last
// layer; a shard admits a request's misses before it answers; each
// (shard, layer) request is one RPC (far below max_rows_per_rpc) served
// on one thread (gather_threads 0). So the admission cache sees the very
// sequence of Lookups and Admits the replay makes, and every count,
// cached and disk too, must match exactly.
TEST_P(ReplayVsServers, CountsEqualTheShardsMetrics) {
  const ReplayCase& c = GetParam();
  const std::string trace = c.narrow ? World::Get().narrow() : World::Get().work();
  std::unique_ptr<TierReplay> replay = Replay(c.profiled, trace);
  ASSERT_NE(replay, nullptr);
  const uint64_t budget =
      static_cast<uint64_t>(c.share * static_cast<double>(replay->shard_bytes()));
  absl::StatusOr<BudgetReplay> predicted = replay->Run(budget);
  ASSERT_TRUE(predicted.ok()) << predicted.status();
  const Measured measured = Drive(c.profiled, budget, trace);
  ASSERT_EQ(measured.tiers.size(), kShards);
  EXPECT_EQ(measured.steps, replay->steps());
  EXPECT_EQ(measured.client.retries, 0u);
  EXPECT_EQ(measured.client.failed_rpcs, 0u);
  uint64_t replay_rows = 0;
  for (uint32_t s = 0; s < kShards; ++s) {
    const ShardReplay& p = predicted->shards[s];
    EXPECT_EQ(p.cache_never_full, c.expect_never_full)
        << "shard " << s << ": " << replay->distinct_rows(s) << " distinct rows, " << p.cache_slots
        << " cache slots";
    if (c.profiled) {  // the profile is the one import wrote
      absl::StatusOr<std::vector<HotProfileEntry>> file =
          ReadHotProfile(World::Get().shard_dir(true, s) + "/hot_profile.bin", replay->map(), s);
      ASSERT_TRUE(file.ok()) << file.status();
      EXPECT_EQ(file->size(), replay->profile_rows(s));
      EXPECT_GT(p.pinned_rows, 0u);
    }
    for (int l = 0; l < replay->n_layers(); ++l) {
      SCOPED_TRACE(absl::StrCat(c.name, ": shard ", s, " layer ", l));
      EXPECT_EQ(measured.tiers[s][l].pinned, p.layers[l].pinned);
      EXPECT_EQ(measured.tiers[s][l].cached, p.layers[l].cached);
      EXPECT_EQ(measured.tiers[s][l].disk, p.layers[l].disk);
      replay_rows += p.layers[l].total();
    }
    // Not a trivial case: rows came from each part of the tier.
    const ReplayCounts all = p.all();
    EXPECT_EQ(all.pinned > 0, c.profiled);
    EXPECT_GT(all.cached, 0u);
    EXPECT_GT(all.disk, 0u);
  }
  EXPECT_EQ(measured.client.rows_fetched, replay_rows);
}

INSTANTIATE_TEST_SUITE_P(
    Budgets, ReplayVsServers,
    ::testing::Values(ReplayCase{"profile_10pct", true, 0.10, false, false},
                      ReplayCase{"profile_35pct", true, 0.35, false, false},
                      ReplayCase{"no_profile_15pct", false, 0.15, false, false},
                      ReplayCase{"no_profile_narrow_80pct", false, 0.80, true, true}),
    [](const ::testing::TestParamInfo<ReplayCase>& i) { return std::string(i.param.name); });

// --- the engramctl binary ---

struct CliRun {
  int code = -1;
  std::vector<std::string> out;  // stdout lines
  std::vector<std::string> err;  // stderr lines
};

CliRun Engramctl(std::vector<std::string> args) {
  static int n = 0;
  const std::string err = World::Get().Sub(absl::StrCat("stderr-", n++));
  args.insert(args.begin(), {std::string(ENGRAM_BIN_DIR) + "/engramctl", "plan"});
  testing::ChildOptions o;
  o.stderr_path = err;
  CliRun r;
  absl::StatusOr<std::unique_ptr<testing::ChildProcess>> child =
      testing::ChildProcess::Spawn(args, o);
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return r;
  while (true) {
    absl::StatusOr<std::string> line = (*child)->ReadLine(absl::Seconds(120));
    if (!line.ok()) break;
    r.out.push_back(*line);
  }
  const int status = (*child)->Wait();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  for (absl::string_view l : absl::StrSplit(testing::ReadFile(err), '\n', absl::SkipEmpty())) {
    r.err.emplace_back(l);
  }
  return r;
}

std::vector<std::string> Base() {
  return {"--trace=" + World::Get().work(),
          "--profile-trace=" + World::Get().profile(),
          "--table=" + World::Get().table(),
          "--shards=3",
          "--disk-iops=20000",
          "--batch=4",
          "--fixed-bytes=0"};  // the replays here leave the RocksDB index out
}

// Without --fixed-bytes, plan estimates a shard's RocksDB index from the
// manifest: within a quarter of the real one (engramctl footprint's).
TEST(PlanCli, EstimatesTheShardsFixedBytes) {
  std::vector<std::string> args = Base();
  args.pop_back();
  args.insert(args.end(), {"--json", "--budgets=50%"});
  const CliRun r = Engramctl(args);
  ASSERT_EQ(r.code, 0) << (r.err.empty() ? "" : r.err[0]);
  const nlohmann::json j = nlohmann::json::parse(absl::StrJoin(r.out, "\n"));
  absl::StatusOr<ShardFootprint> real =
      MeasureShardFootprint(World::Get().shard_dir(true, 0), /*direct_io=*/true);
  ASSERT_TRUE(real.ok()) << real.status();
  ASSERT_GT(real->fixed_bytes, 0u);
  const double estimate = j["inputs"]["fixed_bytes"].get<double>();
  EXPECT_NEAR(estimate, static_cast<double>(real->fixed_bytes),
              0.25 * static_cast<double>(real->fixed_bytes));
  // A budget below it is refused.
  args.back() = "--budgets=1";
  const CliRun low = Engramctl(args);
  EXPECT_EQ(low.code, 2);
  ASSERT_EQ(low.err.size(), 1u);
  EXPECT_TRUE(absl::StrContains(low.err[0], "below a shard's fixed")) << low.err[0];
}

TEST(PlanCli, TextOutput) {
  CliRun r = Engramctl(Base());
  ASSERT_EQ(r.code, 0) << (r.err.empty() ? "" : r.err[0]);
  // Header, column names, 7 budgets, their 7 placements (--policy window,
  // the default), verdict.
  ASSERT_EQ(r.out.size(), 5u + 1 + 7 + 7 + 1);
  EXPECT_TRUE(std::regex_match(r.out[13], std::regex(R"(plan: placement [0-9]+[KMGT]?: policy=)"
                                                     R"((window|frequency) cache_share=[0-9]+%)"
                                                     R"(( layer_pin=[0-9.]+%,[0-9.]+%)? )"
                                                     R"(exposed_wait=[0-9.]+% )"
                                                     R"(frequency_exposed_wait=[0-9.]+%)")))
      << r.out[13];
  EXPECT_TRUE(absl::StartsWith(r.out[0], "plan: workload " + World::Get().work()));
  EXPECT_TRUE(std::regex_match(r.out.back(),
                               std::regex(R"(plan: smallest budget meeting exposed wait <= 1%: )"
                                          R"([0-9]+[KMGT]? per shard \([0-9.]+% of a shard\))")))
      << r.out.back();
  // Nothing meets 0.001% when even a whole shard waits a round trip.
  std::vector<std::string> args = Base();
  args.insert(args.end(), {"--budgets=0,1%", "--target-exposed-wait=0.001%", "--rtt-us=600"});
  r = Engramctl(args);
  ASSERT_EQ(r.code, 0);
  EXPECT_TRUE(std::regex_match(r.out.back(),
                               std::regex(R"(plan: no budget up to [0-9]+ meets exposed wait )"
                                          R"(<= 0.001%)")))
      << r.out.back();
}

TEST(PlanCli, JsonMatchesTheLibrary) {
  std::vector<std::string> args = Base();
  args.insert(args.end(), {"--json", "--budgets=10%,0,64K"});
  const CliRun r = Engramctl(args);
  ASSERT_EQ(r.code, 0) << (r.err.empty() ? "" : r.err[0]);
  const nlohmann::json j = nlohmann::json::parse(absl::StrJoin(r.out, "\n"));
  ASSERT_EQ(j["budgets"].size(), 3u);
  std::unique_ptr<TierReplay> replay = Replay(true, World::Get().work());
  ASSERT_NE(replay, nullptr);
  uint64_t previous = 0;
  for (const nlohmann::json& b : j["budgets"]) {
    const uint64_t bytes = b["bytes"];
    EXPECT_GE(bytes, previous);  // ascending
    previous = bytes;
    // The placement chosen for the budget, replayed.
    TierPlacement placement;
    placement.cache_share_percent = b["placement"]["cache_share_percent"];
    for (double p : b["placement"]["layer_pin_percent"]) {
      placement.layer_pin_shares.push_back(p / 100);
    }
    absl::StatusOr<BudgetReplay> want = replay->Run(bytes, placement);
    ASSERT_TRUE(want.ok());
    EXPECT_DOUBLE_EQ(b["hit_ratio"].get<double>(), want->hit_ratio());
    ASSERT_EQ(b["shards"].size(), kShards);
    for (uint32_t s = 0; s < kShards; ++s) {
      EXPECT_EQ(b["shards"][s]["disk"].get<uint64_t>(), want->shards[s].all().disk);
    }
  }
  EXPECT_EQ(j["budgets"][0]["bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["budgets"][1]["size"].get<std::string>(), "64K");
  // 10% of a shard of 64 KiB..64 MiB: rounded to whole KiB.
  const uint64_t tenth = j["budgets"][2]["bytes"];
  EXPECT_EQ(tenth % 1024, 0u);
  EXPECT_NEAR(static_cast<double>(tenth), 0.1 * static_cast<double>(replay->shard_bytes()), 512);
  EXPECT_EQ(j["budgets"][2]["size"].get<std::string>(), absl::StrCat(tenth / 1024, "K"));
}

// --policy frequency is the replay's own policy; window is never
// predicted worse; --target-exposed-wait searches whole percents and
// --write-tier-plan writes what it found into every shard directory.
TEST(PlanCli, PoliciesTargetAndTierPlans) {
  std::vector<std::string> args = Base();
  args.insert(args.end(), {"--json", "--budgets=10%", "--block-us=100", "--blocks=20",
                           "--disk-iops=100000", "--tokens-per-second=200"});
  std::vector<std::string> freq_args = args;
  freq_args.push_back("--policy=frequency");
  const CliRun f = Engramctl(freq_args);
  ASSERT_EQ(f.code, 0) << (f.err.empty() ? "" : f.err[0]);
  const nlohmann::json fj = nlohmann::json::parse(absl::StrJoin(f.out, "\n"));
  std::unique_ptr<TierReplay> replay = Replay(true, World::Get().work());
  ASSERT_NE(replay, nullptr);
  absl::StatusOr<BudgetReplay> want = replay->Run(fj["budgets"][0]["bytes"].get<uint64_t>());
  ASSERT_TRUE(want.ok());
  EXPECT_DOUBLE_EQ(fj["budgets"][0]["hit_ratio"].get<double>(), want->hit_ratio());
  EXPECT_EQ(fj["budgets"][0]["placement"]["policy"], "frequency");

  std::vector<std::string> dirs;
  for (uint32_t s = 0; s < kShards; ++s) dirs.push_back(World::Get().shard_dir(true, s));
  args.insert(args.end(),
              {"--target-exposed-wait=3%", "--write-tier-plan=" + absl::StrJoin(dirs, ",")});
  const CliRun w = Engramctl(args);
  ASSERT_EQ(w.code, 0) << (w.err.empty() ? "" : w.err[0]);
  const nlohmann::json wj = nlohmann::json::parse(absl::StrJoin(w.out, "\n"));
  EXPECT_LE(wj["budgets"][0]["exposed_wait_percent"].get<double>(),
            fj["budgets"][0]["exposed_wait_percent"].get<double>());
  ASSERT_TRUE(wj["budget_for_target"].is_object()) << wj.dump();
  const nlohmann::json& t = wj["budget_for_target"];
  EXPECT_LE(t["exposed_wait_percent"].get<double>(), 3.0);
  EXPECT_EQ(t["percent_of_shard"].get<double>(), std::round(t["percent_of_shard"].get<double>()));
  ASSERT_EQ(wj["tier_plans_written"].size(), kShards);
  for (const std::string& dir : dirs) {
    absl::StatusOr<TierPlanFile> file = TierPlanFile::Load(absl::StrCat(dir, "/", kTierPlanFile));
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ(file->ram_budget_bytes, t["bytes"].get<uint64_t>());
    EXPECT_EQ(file->cache_share_percent, t["placement"]["cache_share_percent"].get<uint32_t>());
    EXPECT_EQ(file->layer_pin_percent.size(), t["placement"]["layer_pin_percent"].size());
    std::filesystem::remove(absl::StrCat(dir, "/", kTierPlanFile));  // other tests start servers
  }
  // The text form of the search: one line.
  args.erase(std::find(args.begin(), args.end(), "--json"));
  args.pop_back();
  const CliRun text = Engramctl(args);
  ASSERT_EQ(text.code, 0);
  ASSERT_GE(text.out.size(), 2u);
  EXPECT_TRUE(absl::StartsWith(
      text.out[text.out.size() - 2],
      absl::StrCat("plan: budget_for_target=", t["percent_of_shard"].get<double>(), "% size=")))
      << text.out[text.out.size() - 2];
}

TEST(PlanCli, Png) {
  if (testing::RunCommand({"sh", "-c", "command -v gnuplot >/dev/null"}).value_or(1) != 0) {
    GTEST_SKIP() << "gnuplot is not installed";
  }
  const std::string png = World::Get().Sub("plan.png");
  std::vector<std::string> args = Base();
  args.push_back("--png=" + png);
  CliRun r = Engramctl(args);
  ASSERT_EQ(r.code, 0) << (r.err.empty() ? "" : r.err[0]);
  const std::string bytes = testing::ReadFile(png);
  ASSERT_GT(bytes.size(), 8u);
  EXPECT_EQ(bytes.substr(1, 3), "PNG");
  args.back() = "--png=/nonexistent-dir/plan.png";
  r = Engramctl(args);
  EXPECT_EQ(r.code, 1);
  ASSERT_EQ(r.err.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(r.err[0], "engramctl plan: --png /nonexistent-dir/plan.png: "))
      << r.err[0];
}

// Every refusal is one line on stderr naming what to fix, exit 2, no stdout.
TEST(PlanCli, BadInputIsOneLineAndExit2) {
  const std::string empty = World::Get().Sub("empty.trace");
  std::ofstream(empty).close();
  const std::string bad = World::Get().Sub("bad.trace");
  std::ofstream(bad) << "1 2 3\n4 999999999 6\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--trace="}, "needs --trace FILE"},
      {{"--trace=" + World::Get().Sub("missing.trace")}, "--trace "},
      {{"--trace=" + empty}, "has no tokens"},
      {{"--trace=" + bad}, "bad.trace:2: token '999999999'"},
      {{"--profile-trace=/nonexistent"}, "--profile-trace /nonexistent: cannot read"},
      {{"--disk-iops=0"}, "--disk-iops 0: want a number > 0"},
      {{"--disk-iops=-5"}, "--disk-iops -5: want a number > 0"},
      {{"--disk-iops=fast"}, "--disk-iops fast"},
      {{"--disk-iops="}, "needs --disk-iops N"},
      {{"--shards=0"}, "--shards 0: want the number of shard servers"},
      {{"--shards=three"}, "--shards three"},
      {{"--table=" + World::Get().Sub("no-table")}, "--table "},
      {{"--batch=0"}, "--batch 0"},
      {{"--workers=-1"}, "--workers -1"},
      {{"--network-gbps=0"}, "--network-gbps 0"},
      {{"--blocks=10"}, "--blocks 10 must exceed the last Engram layer's block (14"},
      {{"--budgets=1T"}, "--budgets: 1T is larger than a shard"},
      {{"--budgets=150%"}, "--budgets: \"150%\" is not a percentage"},
      {{"--budgets=lots"}, "--budgets: \"lots\" is neither a size"},
      {{"--budgets=,"}, "--budgets is empty"},
      {{"--ram-per-shard=1K", "--budgets=10%,50%"}, "no budget of --budgets is at most"},
      {{"--ram-per-shard=big"}, "--ram-per-shard: "},
      {{"--fixed-bytes=lots"}, "--fixed-bytes: "},
      {{"--target-exposed-wait=low"}, "--target-exposed-wait low"},
      {{"extra"}, "plan takes flags only, not 'extra'"},
      {{"--policy=lru"}, "--policy lru: want window"},
      {{"--fetch-order=random"}, "--fetch-order random: want sequential"},
      {{"--write-tier-plan=" + World::Get().Sub("no-shard"), "--budgets=5%"},
       "is not a shard directory"},
      {{"--write-tier-plan=" + World::Get().Sub("no-shard")}, "--write-tier-plan needs the budget"},
  };
  for (const auto& [extra, want] : cases) {
    std::vector<std::string> args = Base();
    args.insert(args.end(), extra.begin(), extra.end());
    const CliRun r = Engramctl(args);
    SCOPED_TRACE(absl::StrJoin(extra, " "));
    EXPECT_EQ(r.code, 2);
    EXPECT_TRUE(r.out.empty());
    ASSERT_EQ(r.err.size(), 1u) << absl::StrJoin(r.err, "\n");
    EXPECT_TRUE(absl::StartsWith(r.err[0], "engramctl plan: ")) << r.err[0];
    EXPECT_NE(r.err[0].find(want), std::string::npos) << r.err[0];
  }
}

}  // namespace
}  // namespace engram
