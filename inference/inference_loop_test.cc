// The inference loop (inference/inference_loop.h) against an engram-shard
// process on 127.0.0.1 (port 0) serving the small table: a chunked prefill
// decodes the same rows as a prefill in one step, chunk by chunk with the
// next chunk prefetched while the one before computes, and reports its
// chunks apart from the decode steps.
#include "inference/inference_loop.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/engram_client.h"
#include "gtest/gtest.h"
#include "service/testing/server_test_util.h"
#include "service/testing/shard_process.h"

namespace engram {
namespace {

class InferenceLoopTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new testing::TempDir("inference_loop_test");
    absl::StatusOr<testing::SmallShardedTable> t = testing::MakeSmallShardedTable(
        root_->Sub("table"), 1, [](uint32_t) { return root_->Sub("shard-0"); });
    ASSERT_TRUE(t.ok()) << t.status();
    table_ = new testing::SmallShardedTable(std::move(*t));
    testing::ShardProcess::Options o;
    o.binary = std::string(ENGRAM_BIN_DIR) + "/engram-shard";
    o.db_dir = root_->Sub("shard-0");
    o.stderr_path = root_->Sub("shard.err");
    absl::StatusOr<std::unique_ptr<testing::ShardProcess>> shard = testing::ShardProcess::Start(o);
    ASSERT_TRUE(shard.ok()) << shard.status();
    shard_ = shard->release();
  }
  static void TearDownTestSuite() {
    delete shard_;
    delete table_;
    delete root_;
  }

  static std::unique_ptr<EngramClient> Client() {
    ClientOptions co;
    co.table_dir = root_->Sub("table");
    co.shard_map_path = root_->Sub("shard-0/shard_map.json");
    co.shard_addresses = {{shard_->address()}};
    absl::StatusOr<std::unique_ptr<EngramClient>> c = EngramClient::Create(co);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  static TokenTrace Trace() {
    std::mt19937_64 rng(7);
    std::vector<int64_t> tokens(4000);
    for (int64_t& t : tokens) t = static_cast<int64_t>(rng() % testing::kSmallVocab);
    return TokenTrace(std::move(tokens));
  }

  static InferenceLoopOptions Options(const TokenTrace& trace) {
    InferenceLoopOptions o;
    o.trace = &trace;
    o.batch = 4;
    o.prefill = 40;
    o.decode_steps = 6;
    o.blocks = 43;
    o.block_time = absl::ZeroDuration();
    o.verify_per_layer = 400;  // every row of a decode step, most of a chunk's
    o.verify_table = table_->table.get();
    o.measure_skew = false;
    return o;
  }

  static testing::TempDir* root_;
  static testing::SmallShardedTable* table_;
  static testing::ShardProcess* shard_;
};
testing::TempDir* InferenceLoopTest::root_ = nullptr;
testing::SmallShardedTable* InferenceLoopTest::table_ = nullptr;
testing::ShardProcess* InferenceLoopTest::shard_ = nullptr;

TEST_F(InferenceLoopTest, ChunkedPrefillServesTheRowsOfEveryChunk) {
  const TokenTrace trace = Trace();
  for (int chunk : {0, 16, 40, 64}) {
    SCOPED_TRACE(absl::StrCat("prefill_chunk ", chunk));
    std::unique_ptr<EngramClient> client = Client();
    ASSERT_NE(client, nullptr);
    InferenceLoopOptions o = Options(trace);
    o.prefill_chunk = chunk;
    std::vector<int> progress;
    o.progress = [&progress](int done, int) { progress.push_back(done); };
    absl::StatusOr<InferenceLoopResult> r = RunInferenceLoop(*client, o);
    ASSERT_TRUE(r.ok()) << r.status();
    // 16: chunks of 16, 16 and 8 tokens; otherwise the whole 40 at once.
    const int chunks = chunk == 16 ? 3 : 1;
    EXPECT_EQ(r->prefill_chunks, chunks);
    EXPECT_EQ(r->decode_steps, 6);
    EXPECT_EQ(r->all_tokens, 4 * (40 + 6));
    EXPECT_GT(r->prefill_seconds, 0);
    // Every chunk hashed from the sequence state its predecessor left: the
    // rows Wait wrote are the table's (a chunk hashed from a fresh state
    // would look up other rows for its first positions).
    EXPECT_EQ(r->verified, static_cast<uint64_t>(2 * 400 * (chunks + 6)));
    EXPECT_EQ(r->wrong, 0u);
    EXPECT_EQ(client->stats().steps, static_cast<uint64_t>(chunks + 6));
    // Progress reports the prefill once, after its last chunk, then each step.
    ASSERT_FALSE(progress.empty());
    EXPECT_EQ(progress.front(), chunks);
    EXPECT_EQ(progress.back(), chunks + 6);
  }
}

TEST_F(InferenceLoopTest, NegativePrefillChunkIsRefused) {
  const TokenTrace trace = Trace();
  std::unique_ptr<EngramClient> client = Client();
  ASSERT_NE(client, nullptr);
  InferenceLoopOptions o = Options(trace);
  o.prefill_chunk = -1;
  absl::StatusOr<InferenceLoopResult> r = RunInferenceLoop(*client, o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("prefill_chunk (-1)"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace engram
