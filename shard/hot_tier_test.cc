#include "shard/hot_tier.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/format/hot_profile.h"
#include "common/testing/test_files.h"
#include "common/util/file_util.h"
#include "common/util/key_index.h"
#include "gtest/gtest.h"
#include "shard/admission_cache.h"
#include "shard/import/importer.h"
#include "shard/shard_format.h"
#include "shard/testing/hot_tier_fixture.h"

namespace engram {
namespace {

TEST_F(HotTierTest, ZeroBudgetAlwaysMisses) {
  std::unique_ptr<HotTier> tier = Build(0, true);
  ASSERT_NE(tier, nullptr);
  std::mt19937_64 rng(1);
  uint8_t row[kRowBytes];
  for (int i = 0; i < 2000; ++i) {
    auto [l, r] = RandomRow(rng);
    EXPECT_EQ(tier->Lookup(l, r, row), HotResult::kMiss);
    StoreRow(l, r, row);
    tier->Admit(l, r, row);
  }
  EXPECT_EQ(tier->pinned_bytes() + tier->cached_bytes(), 0u);
}

// A cache share of 0 pins the whole budget from the profile and admits
// nothing; over 100% is refused.
TEST_F(HotTierTest, CacheShareZeroPinsTheWholeBudget) {
  const uint64_t budget = ShardBytes() / 10;
  HotTierOptions o;
  o.budget_bytes = budget;
  o.profile_path = ProfilePath();
  o.cache_share_percent = 0;
  absl::StatusOr<std::unique_ptr<HotTier>> tier = HotTier::Build(*store_, o);
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::unique_ptr<HotTier> twenty = Build(budget, true);
  ASSERT_NE(twenty, nullptr);
  EXPECT_GT((*tier)->pinned_bytes(), twenty->pinned_bytes());
  EXPECT_LE((*tier)->pinned_bytes(), budget);
  std::mt19937_64 rng(4);
  uint8_t row[kRowBytes], want[kRowBytes];
  for (int i = 0; i < 2000; ++i) {
    auto [l, r] = RandomRow(rng);
    StoreRow(l, r, want);
    const HotResult res = (*tier)->Lookup(l, r, row);
    EXPECT_NE(res, HotResult::kCached);
    if (res == HotResult::kMiss) (*tier)->Admit(l, r, want);
    if (res == HotResult::kPinned) {
      ASSERT_EQ(0, std::memcmp(row, want, kRowBytes));
    }
  }
  EXPECT_EQ((*tier)->cached_bytes(), 0u);
  o.cache_share_percent = 101;
  EXPECT_EQ(HotTier::Build(*store_, o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(HotTierTest, TenPercentMixesPinnedCachedAndMisses) {
  const uint64_t budget = ShardBytes() / 10;
  std::unique_ptr<HotTier> tier = Build(budget, true);
  ASSERT_NE(tier, nullptr);
  EXPECT_GT(tier->pinned_bytes(), 0u);
  EXPECT_LE(tier->pinned_bytes(), budget * (100 - kHotTierCacheSharePercent) / 100);
  // The most frequent rows of the profile (low row ids) are pinned.
  uint8_t row[kRowBytes], want[kRowBytes];
  EXPECT_EQ(tier->Lookup(0, 1, row), HotResult::kPinned);
  std::mt19937_64 rng(2);
  std::map<HotResult, int> seen;
  for (int i = 0; i < 20000; ++i) {
    // Skewed: half the lookups go to a small set of rows.
    auto [l, r] = RandomRow(rng);
    if (i % 2 == 0) r = 2001 + 2 * (r % 200);  // shard rows beyond the pins
    StoreRow(l, r, want);
    const HotResult res = tier->Lookup(l, r, row);
    ++seen[res];
    if (res == HotResult::kMiss) {
      tier->Admit(l, r, want);
    } else {
      ASSERT_EQ(0, std::memcmp(row, want, kRowBytes)) << l << "/" << r;
    }
  }
  EXPECT_GT(seen[HotResult::kPinned], 0);
  EXPECT_GT(seen[HotResult::kCached], 0);
  EXPECT_GT(seen[HotResult::kMiss], 0);
  EXPECT_GT(tier->cached_bytes(), 0u);
  EXPECT_LE(tier->pinned_bytes() + tier->cached_bytes(), budget);
}

TEST_F(HotTierTest, FullBudgetPinsEveryRowWithoutProfile) {
  EXPECT_EQ(WholeBudget(), shard_rows_ * (kRowBytes + 4) + (shard_rows_ + 63) / 64 * 8 +
                               KeySlotIndex::MemoryBytesFor(0));
  // A byte short of it, the tier is an admission cache of fewer rows.
  std::unique_ptr<HotTier> short_tier = Build(WholeBudget() - 1, false);
  ASSERT_NE(short_tier, nullptr);
  EXPECT_EQ(short_tier->pinned_bytes(), 0u);
  std::unique_ptr<HotTier> tier = Build(WholeBudget(), false);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->pinned_bytes(), ShardBytes());
  EXPECT_EQ(tier->pinned_bytes() + tier->index_bytes(), WholeBudget());
  const ShardMap& map = store_->shard_map();
  uint8_t row[kRowBytes], want[kRowBytes];
  for (uint32_t l = 0; l < map.layer_rows.size(); ++l) {
    for (uint64_t r = 1; r < map.layer_rows[l]; r += 2) {
      ASSERT_EQ(tier->Lookup(l, r, row), HotResult::kPinned) << l << "/" << r;
      StoreRow(l, r, want);
      ASSERT_EQ(0, std::memcmp(row, want, kRowBytes));
    }
  }
  EXPECT_EQ(tier->Lookup(0, map.layer_rows[0] + 1, row), HotResult::kMiss);
}

TEST_F(HotTierTest, ConcurrentLookupsAndAdmitsReturnCorrectBytes) {
  std::unique_ptr<HotTier> tier = Build(ShardBytes() / 20, true);
  ASSERT_NE(tier, nullptr);
  std::atomic<int> wrong{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      uint8_t row[kRowBytes], want[kRowBytes];
      for (int i = 0; i < 20000; ++i) {
        auto [l, r] = RandomRow(rng);
        if (i % 3 != 0) r = 1 + 2 * (r % 300);  // a hot set shared by threads
        const RowRef ref{l, r, want};
        if (!store_->ReadRows({&ref, 1}).ok()) ++wrong;
        if (tier->Lookup(l, r, row) == HotResult::kMiss) {
          tier->Admit(l, r, want);
        } else {
          ++hits;
          if (std::memcmp(row, want, kRowBytes) != 0) ++wrong;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(hits, 0);
}

// LookupBatch agrees with Lookup row by row (bytes, tier and the miss list)
// for dense, indexed and cache-only tiers, on batches longer and shorter
// than its prefetch distance, with rows of other shards and past the layer.
TEST_F(HotTierTest, LookupBatchMatchesLookup) {
  const ShardMap& map = store_->shard_map();
  for (const auto& [budget, profile] :
       std::vector<std::pair<uint64_t, bool>>{{WholeBudget(), false},
                                              {ShardBytes() / 10, true},
                                              {ShardBytes() / 10, false},
                                              {0, false}}) {
    std::unique_ptr<HotTier> tier = Build(budget, profile);
    ASSERT_NE(tier, nullptr);
    std::mt19937_64 rng(budget + profile);
    uint8_t want[kRowBytes];
    for (int i = 0; i < 3000; ++i) {  // warm the admission cache
      auto [l, r] = RandomRow(rng);
      r = 1 + 2 * (r % 400);
      StoreRow(l, r, want);
      tier->Admit(l, r, want);
    }
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{40}, size_t{3001}}) {
      for (uint32_t l = 0; l < map.layer_rows.size(); ++l) {
        std::vector<uint64_t> rows;
        for (size_t k = 0; k < n; ++k) {
          uint64_t r = RandomRow(rng).second;
          if (k % 3 == 0) r = 1 + 2 * (r % 400);
          if (k % 17 == 5) r = 2 * (r / 2);                     // shard 0's row
          if (k % 29 == 11) r = map.layer_rows[l] + 2 * k + 1;  // past the layer
          rows.push_back(r);
        }
        std::vector<uint8_t> batch(n * kRowBytes, 0xAB), one(kRowBytes);
        std::vector<uint32_t> misses;
        const HotBatchResult got = tier->LookupBatch(l, rows, batch.data(), &misses);
        HotBatchResult expect;
        std::vector<uint32_t> expect_misses;
        for (size_t k = 0; k < n; ++k) {
          const HotResult res = tier->Lookup(l, rows[k], one.data());
          if (res == HotResult::kMiss) {
            expect_misses.push_back(static_cast<uint32_t>(k));
            continue;
          }
          ++(res == HotResult::kPinned ? expect.pinned : expect.cached);
          ASSERT_EQ(0, std::memcmp(one.data(), batch.data() + k * kRowBytes, kRowBytes))
              << "budget " << budget << " layer " << l << " row " << rows[k];
        }
        EXPECT_EQ(got.pinned, expect.pinned);
        EXPECT_EQ(got.cached, expect.cached);
        EXPECT_EQ(misses, expect_misses);
      }
    }
  }
}

// With the profile's head held by the workers, pinning starts after it: the
// skipped rows are not pinned and as many later rows are pinned instead.
TEST_F(HotTierTest, SkippedProfileHeadIsNotPinned) {
  const uint64_t budget = ShardBytes() / 10;
  const uint64_t skip_rows = 50;
  absl::StatusOr<std::unique_ptr<HotTier>> plain = HotTier::Build(*store_, {budget, ProfilePath()});
  absl::StatusOr<std::unique_ptr<HotTier>> skipped =
      HotTier::Build(*store_, {budget, ProfilePath(), skip_rows * kRowBytes});
  ASSERT_TRUE(plain.ok() && skipped.ok());
  EXPECT_EQ((*plain)->pinned_bytes(), (*skipped)->pinned_bytes());
  absl::StatusOr<std::vector<HotProfileEntry>> profile =
      ReadHotProfile(ProfilePath(), store_->shard_map(), 1);
  ASSERT_TRUE(profile.ok());
  const uint64_t pinned_rows = (*plain)->pinned_bytes() / kRowBytes;
  ASSERT_GT(profile->size(), pinned_rows + skip_rows);
  uint8_t row[kRowBytes], want[kRowBytes];
  for (uint64_t i = 0; i < pinned_rows + skip_rows; ++i) {
    const HotProfileEntry& e = (*profile)[i];
    const HotResult a = (*plain)->Lookup(e.layer, e.row, row);
    const HotResult b = (*skipped)->Lookup(e.layer, e.row, row);
    EXPECT_EQ(a == HotResult::kPinned, i < pinned_rows) << i;
    EXPECT_EQ(b == HotResult::kPinned, i >= skip_rows) << i;
    if (b == HotResult::kPinned) {
      StoreRow(e.layer, e.row, want);
      ASSERT_EQ(0, std::memcmp(row, want, kRowBytes));
    }
  }
}

TEST_F(HotTierTest, MissingProfileIsAnError) {
  absl::StatusOr<std::unique_ptr<HotTier>> t =
      HotTier::Build(*store_, {ShardBytes() / 10, dir_->Sub("absent.bin")});
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
}

// Lines a scrubber or tier reports, collected.
struct Reports {
  absl::Mutex mu;
  std::vector<std::string> lines ABSL_GUARDED_BY(mu);
  std::function<void(const std::string&)> Sink() {
    return [this](const std::string& line) {
      absl::MutexLock lock(&mu);
      lines.push_back(line);
    };
  }
  bool Has(const std::string& part) {
    absl::MutexLock lock(&mu);
    for (const std::string& l : lines) {
      if (absl::StrContains(l, part)) return true;
    }
    return false;
  }
};

double Stat(const HotTier& tier, const std::string& name) {
  for (const auto& [k, v] : tier.Stats()) {
    if (k == name) return v;
  }
  return -1;
}

// A RAM fault in a pinned row: the scrub finds it, takes the row out of
// service and pins the store's copy again; whole-shard (dense) and
// profile-pinned (indexed) tiers alike.
TEST_F(HotTierTest, ScrubFindsADamagedPinnedRowAndPinsItAgain) {
  for (bool whole : {true, false}) {
    SCOPED_TRACE(whole ? "whole shard" : "profile");
    Reports reports;
    HotTierOptions o;
    o.budget_bytes = whole ? WholeBudget() : ShardBytes() / 10;
    o.profile_path = whole ? "" : ProfilePath();
    o.scrub = {.pinned_bytes_per_second = 0, .disk_bytes_per_second = 0, .report = reports.Sink()};
    absl::StatusOr<std::unique_ptr<HotTier>> tier = HotTier::Build(*store_, o);
    ASSERT_TRUE(tier.ok()) << tier.status();
    uint8_t* pinned = (*tier)->PinnedRowForTesting(0, 1);
    ASSERT_NE(pinned, nullptr);
    pinned[10] ^= 0x40;
    const ScrubStats s = (*tier)->ScrubNow();
    EXPECT_EQ(s.pinned_rows, (*tier)->pinned_bytes() / kRowBytes);
    EXPECT_EQ(s.pinned_failures, 1u);
    EXPECT_EQ(s.pinned_repaired, 1u);
    EXPECT_EQ(s.disk_rows, shard_rows_);
    EXPECT_EQ(s.disk_failures, 0u);
    EXPECT_EQ(s.layer_mismatches, 0u);
    EXPECT_TRUE(reports.Has("layer 0 row 1: its pinned copy in RAM fails its checksum"));
    EXPECT_TRUE(reports.Has("layer 0 row 1: pinned again from the store's copy"));
    uint8_t row[kRowBytes], want[kRowBytes];
    ASSERT_EQ((*tier)->Lookup(0, 1, row), HotResult::kPinned);
    StoreRow(0, 1, want);
    EXPECT_EQ(0, std::memcmp(row, want, kRowBytes));
    EXPECT_EQ(Stat(**tier, "scrub_pinned_failures"), 1);
    EXPECT_EQ(Stat(**tier, "hot_quarantined_rows"), 0);
    // A second pass finds nothing.
    EXPECT_EQ((*tier)->ScrubNow().pinned_failures, 0u);
  }
}

// The background walk finds the same within its rate.
TEST_F(HotTierTest, BackgroundScrubFindsADamagedPinnedRow) {
  Reports reports;
  HotTierOptions o;
  o.budget_bytes = ShardBytes() / 10;
  o.profile_path = ProfilePath();
  o.scrub = {
      .pinned_bytes_per_second = 64 << 20, .disk_bytes_per_second = 0, .report = reports.Sink()};
  absl::StatusOr<std::unique_ptr<HotTier>> tier = HotTier::Build(*store_, o);
  ASSERT_TRUE(tier.ok()) << tier.status();
  (*tier)->PinnedRowForTesting(1, 3)[0] ^= 1;
  for (int i = 0; i < 1000 && Stat(**tier, "scrub_pinned_repaired") < 1; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(Stat(**tier, "scrub_pinned_failures"), 1);
  EXPECT_EQ(Stat(**tier, "scrub_pinned_repaired"), 1);
  EXPECT_GT(Stat(**tier, "scrub_pinned_passes"), 0);
  EXPECT_TRUE(reports.Has("layer 1 row 3: its pinned copy in RAM fails its checksum"));
  uint8_t row[kRowBytes], want[kRowBytes];
  ASSERT_EQ((*tier)->Lookup(1, 3, row), HotResult::kPinned);
  StoreRow(1, 3, want);
  EXPECT_EQ(0, std::memcmp(row, want, kRowBytes));
}

// Flips a byte of row (layer, row) in the table files of cuckoo shard `dir`.
void DamageStoredRow(const std::string& dir, const std::vector<uint8_t>& bytes) {
  bool flipped = false;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/" + kShardDbDir)) {
    if (e.path().extension() != ".sst") continue;
    absl::StatusOr<std::string> file = ReadFileToString(e.path().string());
    ASSERT_TRUE(file.ok());
    const size_t at = file->find(std::string(bytes.begin(), bytes.end()));
    if (at == std::string::npos) continue;
    ASSERT_TRUE(testing::FlipByte(e.path().string(), at + bytes.size() / 2).ok());
    flipped = true;
  }
  ASSERT_TRUE(flipped);
}

// Rows the store cannot return are not pinned (and not served from RAM); a
// pinned row damaged in RAM whose store copy is damaged too stays out of
// service: Lookups miss it, and the store's read is DATA_LOSS.
TEST_F(HotTierTest, DamagedRowsAreNeverServedFromRam) {
  testing::TempDir scratch;
  ImportOptions io;
  io.table_dir = dir_->Sub("table");
  io.n_shards = 2;
  io.shard_index = 1;
  io.out_dir = scratch.Sub("cuckoo");
  io.tail_format = TailFormat::kCuckoo;
  ASSERT_TRUE(ImportShard(io, nullptr).ok());
  std::vector<uint8_t> row5(kRowBytes), row7(kRowBytes);
  StoreRow(0, 5, row5.data());
  StoreRow(0, 7, row7.data());
  DamageStoredRow(io.out_dir, row5);
  absl::StatusOr<std::unique_ptr<RowStore>> store = RowStore::Open(io.out_dir, {});
  ASSERT_TRUE(store.ok()) << store.status();
  Reports reports;
  HotTierOptions o;
  o.budget_bytes = WholeBudget();
  o.scrub = {.pinned_bytes_per_second = 0, .disk_bytes_per_second = 0, .report = reports.Sink()};
  absl::StatusOr<std::unique_ptr<HotTier>> tier = HotTier::Build(**store, o);
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ(Stat(**tier, "hot_damaged_at_load"), 1);
  EXPECT_TRUE(reports.Has("layer 0 row 5 is not pinned, the store cannot return it"));
  uint8_t got[kRowBytes];
  EXPECT_EQ((*tier)->Lookup(0, 5, got), HotResult::kMiss);
  ASSERT_EQ((*tier)->Lookup(0, 7, got), HotResult::kPinned);

  // Row 7: damaged on disk (the mapping shares the page cache) and in RAM.
  DamageStoredRow(io.out_dir, row7);
  (*tier)->PinnedRowForTesting(0, 7)[3] ^= 0x10;
  const ScrubStats s = (*tier)->ScrubNow();
  EXPECT_EQ(s.pinned_failures, 1u);
  EXPECT_EQ(s.pinned_repaired, 0u);
  EXPECT_EQ(s.disk_failures, 2u);  // rows 5 and 7
  EXPECT_EQ(Stat(**tier, "hot_quarantined_rows"), 2);
  const uint64_t rows[] = {1, 5, 7, 9};
  std::vector<uint8_t> out(4 * kRowBytes);
  std::vector<uint32_t> misses;
  const HotBatchResult batch = (*tier)->LookupBatch(0, rows, out.data(), &misses);
  EXPECT_EQ(batch.pinned, 2u);
  EXPECT_EQ(misses, (std::vector<uint32_t>{1, 2}));
  const RowRef ref{0, 7, got};
  EXPECT_EQ((*store)->ReadRows({&ref, 1}).code(), absl::StatusCode::kDataLoss);

  // Too many rows that cannot be loaded fail the build.
  o.max_damaged_rows = 0;
  tier = HotTier::Build(**store, o);
  EXPECT_EQ(tier.status().code(), absl::StatusCode::kDataLoss) << tier.status();
}

// The disk walk hashes each layer's rows and compares with shard.json.
TEST_F(HotTierTest, ScrubComparesEachLayerWithShardJson) {
  testing::TempDir scratch;
  const std::string dir = scratch.Sub("shard");
  std::filesystem::copy(store_->shard_dir(), dir, std::filesystem::copy_options::recursive);
  absl::StatusOr<ShardInfo> info = ShardInfo::Load(dir + "/" + kShardInfoFile);
  ASSERT_TRUE(info.ok());
  info->layers[1].checksum = "xxh3_64:0123456789abcdef";
  ASSERT_TRUE(info->Save(dir + "/" + kShardInfoFile).ok());
  absl::StatusOr<std::unique_ptr<RowStore>> store = RowStore::Open(dir, {});
  ASSERT_TRUE(store.ok()) << store.status();
  Reports reports;
  HotTierOptions o;
  o.scrub = {.pinned_bytes_per_second = 0, .disk_bytes_per_second = 0, .report = reports.Sink()};
  absl::StatusOr<std::unique_ptr<HotTier>> tier = HotTier::Build(**store, o);
  ASSERT_TRUE(tier.ok()) << tier.status();
  const ScrubStats s = (*tier)->ScrubNow();
  EXPECT_EQ(s.layer_mismatches, 1u);
  EXPECT_EQ(s.disk_failures, 0u);
  EXPECT_EQ(s.disk_passes, 1u);
  EXPECT_TRUE(reports.Has("the rows of layer 1 hash to "));
  EXPECT_TRUE(reports.Has("shard.json says xxh3_64:0123456789abcdef"));
}

TEST(KeySlotIndexTest, MatchesAMapUnderInsertAndErase) {
  KeySlotIndex index(1000);
  std::unordered_map<uint64_t, uint32_t> model;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t key = rng() % 3000;  // dense: long probe runs
    if (model.size() < 1000 && rng() % 2 == 0) {
      if (!model.count(key)) {
        model[key] = i;
        index.Insert(key, i);
      }
    } else {
      model.erase(key);
      index.Erase(key);
    }
    const uint64_t probe = rng() % 3000;
    auto it = model.find(probe);
    ASSERT_EQ(index.Find(probe), it == model.end() ? KeySlotIndex::kNoSlot : it->second);
  }
}

}  // namespace
}  // namespace engram
