// Three engram-shard processes serving a table imported with engramctl:
// lookups routed by the shard map and compared byte for byte with the
// table, a SIGTERM drain with calls in flight, a stopped shard failing a
// client's step at its deadline, /metrics through promtool, and the
// daemon's errors for bad flags and data.
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/engram_client.h"
#include "common/format/shard_map.h"
#include "common/format/table.h"
#include "common/util/status_macros.h"
#include "engram/v1/engram_store.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/wire.h"
#include "service/testing/pending_lookups.h"
#include "service/testing/server_test_util.h"
#include "service/testing/shard_process.h"

namespace engram {
namespace {

using testing::RunCommand;
using testing::ShardProcess;

constexpr uint32_t kShards = 3;
constexpr char kLookup[] = "/engram.v1.EngramStore/Lookup";
const std::string kBin = ENGRAM_BIN_DIR;

// engram-shard on free ports, with a hot tier of `ram_budget`.
absl::StatusOr<std::unique_ptr<ShardProcess>> StartShard(
    const std::string& db, const std::string& ram_budget,
    const std::vector<std::string>& extra_flags = {}) {
  ShardProcess::Options o;
  o.binary = kBin + "/engram-shard";
  o.db_dir = db;
  o.flags = {"--ram-budget", ram_budget};
  o.flags.insert(o.flags.end(), extra_flags.begin(), extra_flags.end());
  return ShardProcess::Start(o);
}

class ShardClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new testing::TempDir("shard_cluster_test");
    const std::string table = root_->path() + "/table";
    ASSERT_EQ(RunCommand({kBin + "/engramctl", "gen-table", "--out", table, "--preset", "small",
                          "--engram-vocab-size", std::to_string(testing::kSmallVocab),
                          "--table-name", testing::kSmallTableName, "--table-version",
                          std::to_string(testing::kSmallTableVersion)})
                  .value_or(-1),
              0);
    for (uint32_t i = 0; i < kShards; ++i) {
      ASSERT_EQ(RunCommand({kBin + "/engramctl", "import", "--table", table, "--shards",
                            std::to_string(kShards), "--shard-index", std::to_string(i), "--out",
                            ShardDir(i)})
                    .value_or(-1),
                0);
    }
    auto map = ShardMap::Load(ShardDir(0) + "/shard_map.json");
    ASSERT_TRUE(map.ok()) << map.status();
    map_ = new ShardMap(*map);
    auto reader = TableReader::Open(table);
    ASSERT_TRUE(reader.ok()) << reader.status();
    table_ = reader->release();
    for (uint32_t i = 0; i < kShards; ++i) {
      auto shard = StartShard(ShardDir(i), "64K");
      ASSERT_TRUE(shard.ok()) << shard.status();
      shards_[i] = std::move(*shard);
    }
  }
  static void TearDownTestSuite() {
    for (auto& s : shards_) s.reset();
    delete table_;
    delete map_;
    delete root_;
  }

  static std::string ShardDir(uint32_t i) { return absl::StrCat(root_->path(), "/shard-", i); }

  static testing::TempDir* root_;
  static ShardMap* map_;
  static TableReader* table_;
  static std::unique_ptr<ShardProcess> shards_[kShards];
};

testing::TempDir* ShardClusterTest::root_ = nullptr;
ShardMap* ShardClusterTest::map_ = nullptr;
TableReader* ShardClusterTest::table_ = nullptr;
std::unique_ptr<ShardProcess> ShardClusterTest::shards_[kShards];

// A batch of ids of every layer, spread over the cluster by the shard map,
// reassembled in request order and compared with the table.
TEST_F(ShardClusterTest, RoutedLookupsReturnTheTablesBytes) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 5; ++round) {
    for (uint32_t layer = 0; layer < map_->layer_rows.size(); ++layer) {
      std::vector<uint64_t> ids(400);
      for (uint64_t& id : ids) id = rng() % map_->layer_rows[layer];
      ids.push_back(ids.front());  // a repeat
      const size_t row_bytes = map_->row_bytes[layer];

      std::vector<std::vector<uint64_t>> per_shard(kShards);
      for (uint64_t id : ids) per_shard[map_->ShardOf(id)].push_back(id);
      std::vector<std::string> rows(kShards);
      for (uint32_t s = 0; s < kShards; ++s) {
        const wire::LayerRowIds request{layer, per_shard[s]};
        grpc::Slice slice = wire::EncodeLookupRequest(testing::kSmallTableName,
                                                      testing::kSmallTableVersion, {&request, 1});
        grpc::ByteBuffer response;
        const grpc::Status status =
            testing::RawUnaryCall(*testing::LocalChannel(shards_[s]->port()), kLookup,
                                  grpc::ByteBuffer(&slice, 1), &response);
        ASSERT_TRUE(status.ok()) << status.error_message();
        rows[s].resize(per_shard[s].size() * row_bytes);
        ASSERT_TRUE(wire::DecodeLookupResponse(
                        response, {reinterpret_cast<uint8_t*>(rows[s].data()), rows[s].size()})
                        .ok());
      }
      std::string got;
      std::vector<size_t> next(kShards, 0);
      for (uint64_t id : ids) {
        const uint32_t s = map_->ShardOf(id);
        got.append(rows[s], next[s]++ * row_bytes, row_bytes);
      }
      ASSERT_TRUE(got == testing::ExpectedRows(*table_, layer, ids))
          << "layer " << layer << " round " << round;
    }
  }
}

TEST_F(ShardClusterTest, InfoNamesEachShard) {
  for (uint32_t s = 0; s < kShards; ++s) {
    auto stub = v1::EngramStore::NewStub(testing::LocalChannel(shards_[s]->port()));
    grpc::ClientContext context;
    v1::InfoResponse info;
    ASSERT_TRUE(stub->Info(&context, v1::InfoRequest(), &info).ok());
    EXPECT_EQ(info.shard_index(), s);
    EXPECT_EQ(info.n_shards(), kShards);
    EXPECT_EQ(info.table(), testing::kSmallTableName);
    EXPECT_LE(info.hot_bytes(), 64u << 10);
  }
}

TEST_F(ShardClusterTest, MetricsPassPromtool) {
  std::mt19937_64 rng(3);
  const std::vector<uint64_t> ids = testing::RandomOwnedIds(*map_, 0, 0, 50, rng);
  auto stub = v1::EngramStore::NewStub(testing::LocalChannel(shards_[0]->port()));
  v1::LookupRequest request;
  request.set_table(testing::kSmallTableName);
  request.set_version(testing::kSmallTableVersion);
  v1::LayerRows* layer = request.add_layers();
  for (uint64_t id : ids) layer->add_row_ids(id);
  grpc::ClientContext context;
  v1::LookupResponse response;
  ASSERT_TRUE(stub->Lookup(&context, request, &response).ok());

  auto page = testing::HttpGet(shards_[0]->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_GE(testing::MetricValue(*page, "engram_shard_bytes_total{layer=\"0\"}").value_or(0),
            50.0 * map_->row_bytes[0]);
  const std::string file = root_->path() + "/metrics.txt";
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fwrite(page->data(), 1, page->size(), f);
  std::fclose(f);
  auto rc = RunCommand({"promtool", "check", "metrics"}, file);
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ(*rc, 0) << *page;
}

// SIGTERM with calls in flight: each completes with the right bytes, the
// process exits 0, and afterwards the port refuses calls.
TEST_F(ShardClusterTest, SigtermDrainsInFlightCalls) {
  // Every row from disk, on one reader thread: the calls are all dispatched
  // long before their reads finish.
  auto shard = StartShard(ShardDir(1), "0", {"--reader-threads", "1"});
  ASSERT_TRUE(shard.ok()) << shard.status();
  std::mt19937_64 rng(11);
  const std::vector<uint64_t> ids = testing::RandomOwnedIds(*map_, 1, 1, 60000, rng);
  const std::string expected = testing::ExpectedRows(*table_, 1, ids);
  const wire::LayerRowIds layer{1, ids};
  grpc::Slice slice =
      wire::EncodeLookupRequest(testing::kSmallTableName, testing::kSmallTableVersion, {&layer, 1});
  const grpc::ByteBuffer request(&slice, 1);

  constexpr int kCalls = 4;
  {
    testing::PendingLookups calls((*shard)->port(), request, kCalls);
    // Every call is in a handler now. (gRPC cancels calls whose request has
    // not fully arrived when Shutdown starts; those were never accepted.)
    ASSERT_TRUE(calls.AllInFlight((*shard)->metrics_port()))
        << "calls finished too fast to test a drain";
    (*shard)->Signal(SIGTERM);
    calls.ExpectEveryRowsEqual(expected);
  }
  const int status = (*shard)->Wait();
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);

  grpc::ByteBuffer response;
  EXPECT_EQ(testing::RawUnaryCall(*testing::LocalChannel((*shard)->port()), kLookup, request,
                                  &response, absl::Seconds(2))
                .error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

// Waits (up to 10 s) until every thread of `pid` is stopped: kill(SIGSTOP)
// returns before the group stop has reached them all.
bool AllThreadsStopped(pid_t pid) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  while (absl::Now() < give_up) {
    bool all = true;
    for (const auto& t : std::filesystem::directory_iterator(tasks)) {
      // "pid (comm) S ...": the state follows the last ')'.
      const std::string stat = testing::ReadFile(t.path().string() + "/stat");
      const size_t paren = stat.rfind(')');
      if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'T') {
        all = false;
        break;
      }
    }
    if (all) return true;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return false;
}

// A client of the cluster's shards and a one-sequence step to run on it.
class StepRunner {
 public:
  explicit StepRunner(EngramClient& client) : client_(client) {
    for (size_t i = 0; i < tokens_.size(); ++i) tokens_[i] = static_cast<int64_t>(7 * i + 1);
  }
  // One step, waiting for layer 0; *took from Prefetch to the answer.
  absl::Status RunStep(absl::Duration* took) {
    std::unique_ptr<Sequence> seq = client_.NewSequence();
    Sequence* ptr = seq.get();
    const std::vector<int64_t> starts = {0};
    const absl::Time start = absl::Now();
    ASSIGN_OR_RETURN(
        Step step,
        client_.Prefetch(
            {std::span(&ptr, 1), starts, static_cast<int64_t>(tokens_.size()), tokens_, {}}));
    absl::Status s = step.WaitArrived(0);
    *took = absl::Now() - start;
    return s;
  }
  // Until a step succeeds (for up to 20 s): the row streams connect in the
  // background (and back off when a first connect fails), and on a loaded
  // machine the first steps may miss a short deadline.
  absl::Status RunUntilOk() {
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    absl::Duration took;
    absl::Status s;
    while (!(s = RunStep(&took)).ok() && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    return s;
  }

 private:
  EngramClient& client_;
  std::vector<int64_t> tokens_ = std::vector<int64_t>(16);
};

ClientOptions ClusterClientOptions(const std::string& root,
                                   const std::unique_ptr<ShardProcess> (&shards)[kShards]) {
  ClientOptions o;
  o.table_dir = root + "/table";
  o.shard_map_path = root + "/shard-0/shard_map.json";
  for (const auto& s : shards) o.shard_addresses.push_back({s->address()});
  return o;
}

// A shard that stops answering (SIGSTOP) fails a client's step with
// DEADLINE_EXCEEDED naming it once the RPC deadline has passed, over the row
// stream (whose reader is not woken for a call due after its current poll
// ends: it looks at the call when that poll returns, at most 100 ms later);
// after SIGCONT the shard serves steps again. With a long RPC deadline, the
// step deadline bounds the wait the same way.
TEST_F(ShardClusterTest, AStoppedShardFailsTheStepAtTheDeadline) {
  constexpr absl::Duration kDeadline = absl::Milliseconds(300);
  for (const bool step_deadline : {false, true}) {
    SCOPED_TRACE(step_deadline ? "step deadline" : "RPC deadline");
    ClientOptions o = ClusterClientOptions(root_->path(), shards_);
    o.rpc_deadline = step_deadline ? absl::Seconds(60) : kDeadline;
    if (step_deadline) o.step_deadline = kDeadline;
    absl::StatusOr<std::unique_ptr<EngramClient>> client = EngramClient::Create(o);
    ASSERT_TRUE(client.ok()) << client.status();
    StepRunner runner(**client);
    const absl::Status first = runner.RunUntilOk();
    ASSERT_TRUE(first.ok()) << first;
    ASSERT_GT((*client)->stats().stream_answers, 0u) << "the shards' row streams were not used";

    shards_[1]->Signal(SIGSTOP);
    ASSERT_TRUE(AllThreadsStopped(shards_[1]->pid()));
    absl::Duration took;
    const absl::Status s = runner.RunStep(&took);
    shards_[1]->Signal(SIGCONT);
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find(step_deadline ? "shard(s) 1 " : "shard 1"), std::string::npos) << s;
    if (step_deadline) {
      EXPECT_NE(s.message().find("step_deadline"), std::string::npos) << s;
    }
    EXPECT_GE(took, kDeadline);
    // Unenforced, the step would wait on the stopped shard for good (or the
    // 60 s RPC deadline): 20 s is no speed bound, only that line.
    EXPECT_LT(took, kDeadline + absl::Seconds(20)) << "the deadline was not enforced";
    const absl::Status after = runner.RunUntilOk();
    EXPECT_TRUE(after.ok()) << after;
  }
}

// Bad flags exit 2 and bad data or a taken port exit 1, each with a line on
// stderr saying what is wrong.
TEST_F(ShardClusterTest, BadFlagsAndDataFailWithOneLine) {
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {{}, 2, "--db"},
      {{"--db", ShardDir(0), "--ram-budget", "12Q"}, 2, "12Q"},
      {{"--db", ShardDir(0), "--worker-cache-bytes", "-5"}, 2, "--worker-cache-bytes"},
      {{"--db", ShardDir(0), "--threads", "0"}, 2, "threads"},
      {{"--db", ShardDir(0), "--stream-port", "70000"}, 2, "row stream port 70000"},
      {{"--db", ShardDir(0), "--hot-cache-share", "101"}, 2, "cache share 101%"},
      {{"--db", root_->path() + "/nope"}, 1, root_->path() + "/nope"},
      {{"--db", ShardDir(0), "--listen", absl::StrCat("127.0.0.1:", shards_[0]->port())},
       1,
       "cannot listen"},
      {{"--db", ShardDir(0), "--listen", "127.0.0.1:0", "--stream-port",
        absl::StrCat(shards_[0]->port())},
       1,
       "row stream: cannot listen on 127.0.0.1:"},
  };
  const std::string err = root_->path() + "/stderr.txt";
  for (const Case& c : cases) {
    std::vector<std::string> argv = {kBin + "/engram-shard"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    auto rc = RunCommand(argv, "", err);
    ASSERT_TRUE(rc.ok()) << rc.status();
    EXPECT_EQ(*rc, c.exit_code) << absl::StrJoin(c.args, " ");
    const std::string text = testing::ReadFile(err);
    std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
    ASSERT_FALSE(lines.empty());
    // gRPC may log its own bind failure first; ours is the last line.
    EXPECT_EQ(lines.back().rfind("engram-shard: ", 0), 0u) << text;
    EXPECT_NE(lines.back().find(c.message_part), std::string::npos) << text;
    if (c.exit_code == 2) {
      EXPECT_EQ(lines.size(), 1u) << text;
    }
  }
}

}  // namespace
}  // namespace engram
