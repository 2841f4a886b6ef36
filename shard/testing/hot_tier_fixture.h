// HotTierTest: the hot tier's test fixture, shared by shard/hot_tier_test.cc
// and shard/hot_tier_shares_test.cc. Shard 1 of 2 of a generated table (the
// small preset), opened once per suite, with a profile that favours low
// rows. Tests only.
#ifndef ENGRAM_SHARD_TESTING_HOT_TIER_FIXTURE_H_
#define ENGRAM_SHARD_TESTING_HOT_TIER_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/format/hot_profile.h"
#include "common/testing/test_files.h"
#include "gtest/gtest.h"
#include "shard/hot_tier.h"
#include "shard/import/importer.h"
#include "shard/row_store.h"

namespace engram {

class HotTierTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kRowBytes = 66;  // the small preset
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_TRUE(testing::MakeSmallTable(dir_->Sub("table")).ok());
    ImportOptions o;
    o.table_dir = dir_->Sub("table");
    o.n_shards = 2;
    o.shard_index = 1;
    o.out_dir = dir_->Sub("shard");
    ASSERT_TRUE(ImportShard(o, nullptr).ok());
    absl::StatusOr<std::unique_ptr<RowStore>> s = RowStore::Open(o.out_dir, {.reader_threads = 4});
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = s->release();
    const ShardMap& map = store_->shard_map();
    std::vector<HotProfileEntry> profile;
    for (uint32_t l = 0; l < map.layer_rows.size(); ++l) {
      for (uint64_t r = 1; r < map.layer_rows[l]; r += 2) {
        profile.push_back({l, r, 1 + 100000 / (r + 1)});
        ++shard_rows_;
      }
    }
    ASSERT_TRUE(WriteHotProfile(ProfilePath(), profile).ok());
  }
  static void TearDownTestSuite() {
    delete store_;
    delete dir_;
  }
  static std::string ProfilePath() { return dir_->Sub("profile.bin"); }
  static uint64_t ShardBytes() { return shard_rows_ * kRowBytes; }
  // The budget that pins every row: the rows with their checksums and
  // out-of-service bits.
  static uint64_t WholeBudget() {
    return HotTierWholeShardBytes(store_->shard_map(), store_->shard_index());
  }

  static std::unique_ptr<HotTier> Build(uint64_t budget, bool profile) {
    absl::StatusOr<std::unique_ptr<HotTier>> t =
        HotTier::Build(*store_, {budget, profile ? ProfilePath() : ""});
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }
  // A random row of the shard.
  static std::pair<uint32_t, uint64_t> RandomRow(std::mt19937_64& rng) {
    const ShardMap& map = store_->shard_map();
    const uint32_t l = rng() % map.layer_rows.size();
    return {l, 1 + 2 * (rng() % map.RowsOnShard(l, 1))};
  }
  static void StoreRow(uint32_t l, uint64_t r, uint8_t* out) {
    const RowRef ref{l, r, out};
    ASSERT_TRUE(store_->ReadRows({&ref, 1}).ok());
  }

  static inline testing::TempDir* dir_ = nullptr;
  static inline RowStore* store_ = nullptr;
  static inline uint64_t shard_rows_ = 0;
};

}  // namespace engram

#endif  // ENGRAM_SHARD_TESTING_HOT_TIER_FIXTURE_H_
