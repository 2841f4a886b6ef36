// Layer shares (HotTierOptions::layer_pin_shares): each layer pins its own
// hottest rows up to its share, then its rows the profile never saw; the
// rest goes in profile order.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "common/format/hot_profile.h"
#include "gtest/gtest.h"
#include "shard/hot_tier.h"
#include "shard/shard_format.h"
#include "shard/testing/hot_tier_fixture.h"

namespace engram {
namespace {

// Layer shares: each layer pins its own hottest rows up to its share, the
// rest goes in profile order; no shares is the frequency policy, a prefix.
TEST_F(HotTierTest, LayerPinShares) {
  const ShardMap& map = store_->shard_map();
  absl::StatusOr<std::vector<HotProfileEntry>> profile = ReadHotProfile(ProfilePath(), map, 1);
  ASSERT_TRUE(profile.ok());
  HotTierOptions o{ShardBytes() / 10, ""};
  o.cache_share_percent = 0;
  absl::StatusOr<HotTierPlan> freq = PlanHotTier(map, 1, o, &*profile);
  ASSERT_TRUE(freq.ok());
  for (size_t i = 0; i < freq->pinned_keys.size(); ++i) {
    ASSERT_EQ(freq->pinned_keys[i], ShardKey((*profile)[i].layer, (*profile)[i].row));
  }
  const uint64_t n = freq->pinned_keys.size();
  for (double first : {0.0, 0.3, 0.5, 1.0}) {
    o.layer_pin_shares = {first, 1 - first};
    absl::StatusOr<HotTierPlan> p = PlanHotTier(map, 1, o, &*profile);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->pinned_keys.size(), n);  // the same budget, other rows
    EXPECT_EQ(p->bytes, freq->bytes);
    uint64_t per_layer[2] = {0, 0};
    for (uint64_t k : p->pinned_keys) ++per_layer[ShardKeyLayer(k)];
    for (int l = 0; l < 2; ++l) {  // within its share (a row of rounding)
      EXPECT_LE(per_layer[l], o.layer_pin_shares[l] * static_cast<double>(n) + 1) << first;
    }
  }
  // A share a layer cannot use goes to the other: layer 1 alone in the
  // profile, layer 0's 90% share pins layer 1's rows.
  std::vector<HotProfileEntry> only1;
  for (const HotProfileEntry& e : *profile) {
    if (e.layer == 1) only1.push_back(e);
  }
  o.layer_pin_shares = {0.9, 0.1};
  absl::StatusOr<HotTierPlan> p = PlanHotTier(map, 1, o, &only1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->pinned_keys.size(), std::min<uint64_t>(n, only1.size()));
  for (const auto& [shares, field] : std::vector<std::pair<std::vector<double>, std::string>>{
           {{0.5}, "layer_pin_shares has 1"},
           {{0.7, 0.4}, "layer_pin_shares sum to"},
           {{-0.1, 0.5}, "layer_pin_shares[0]"},
           {{0.5, std::nan("")}, "layer_pin_shares[1]"}}) {
    o.layer_pin_shares = shares;
    const absl::Status s = PlanHotTier(map, 1, o, &*profile).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(s.message(), field)) << s.message();
  }
  // Build reads the whole profile: all of layer 1's share is pinned, rows
  // far down the file included.
  o.profile_path = ProfilePath();
  o.layer_pin_shares = {0, 1};
  absl::StatusOr<std::unique_ptr<HotTier>> tier = HotTier::Build(*store_, o);
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ((*tier)->pinned_bytes(), n * kRowBytes);
  uint8_t row[kRowBytes];
  uint64_t pinned1 = 0;
  for (const HotProfileEntry& e : *profile) {
    const bool pinned = (*tier)->Lookup(e.layer, e.row, row) == HotResult::kPinned;
    EXPECT_TRUE(!pinned || e.layer == 1);
    pinned1 += pinned;
  }
  EXPECT_EQ(pinned1, n);
}

// A share that reaches past a layer's profile rows pins the layer's other
// rows too: a share that covers the layer holds all of it, so none of its
// lookups, rows the profile never saw included, goes to the store.
TEST_F(HotTierTest, ALayerShareThatCoversTheLayerPinsRowsTheProfileNeverSaw) {
  const ShardMap& map = store_->shard_map();
  absl::StatusOr<std::vector<HotProfileEntry>> full = ReadHotProfile(ProfilePath(), map, 1);
  ASSERT_TRUE(full.ok());
  // A profile that saw a third of the shard's rows.
  std::vector<HotProfileEntry> seen(full->begin(), full->begin() + full->size() / 3);
  const std::string path = dir_->Sub("third.bin");
  ASSERT_TRUE(WriteHotProfile(path, seen).ok());
  absl::StatusOr<std::vector<HotProfileEntry>> profile = ReadHotProfile(path, map, 1);
  ASSERT_TRUE(profile.ok());
  std::vector<uint64_t> layer0;  // shard 1's rows of layer 0
  for (uint64_t r = 1; r < map.layer_rows[0]; r += map.n_shards) layer0.push_back(r);
  uint64_t profiled0 = 0;
  for (const HotProfileEntry& e : *profile) profiled0 += e.layer == 0;
  ASSERT_LT(profiled0, layer0.size());  // some rows the profile never saw
  HotTierOptions o{ShardBytes() * 9 / 10, path};
  o.cache_share_percent = 0;
  o.layer_pin_shares = {0.5, 0.5};
  absl::StatusOr<HotTierPlan> half = PlanHotTier(map, 1, o, &*profile);
  ASSERT_TRUE(half.ok()) << half.status();
  const double rows = static_cast<double>(half->pinned_keys.size());  // what the budget pins
  const double first = static_cast<double>(layer0.size()) / rows + 0.05;
  ASSERT_LT(first, 0.95);  // layer 1 keeps a share
  o.layer_pin_shares = {first, 1 - first};
  absl::StatusOr<HotTierPlan> plan = PlanHotTier(map, 1, o, &*profile);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::flat_hash_set<uint64_t> keys(plan->pinned_keys.begin(), plan->pinned_keys.end());
  EXPECT_EQ(keys.size(), plan->pinned_keys.size());  // no row twice
  for (uint64_t r : layer0) ASSERT_TRUE(keys.contains(ShardKey(0, r))) << r;
  for (uint64_t k : plan->pinned_keys) {
    if (ShardKeyLayer(k) == 1) {
      ASSERT_EQ(ShardKeyRow(k) % map.n_shards, 1u);
    }
  }
  absl::StatusOr<std::unique_ptr<HotTier>> tier = HotTier::Build(*store_, o);
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_LE((*tier)->pinned_bytes() + (*tier)->index_bytes(), o.budget_bytes);
  uint8_t row[kRowBytes], want[kRowBytes];
  for (uint64_t r : layer0) {
    ASSERT_EQ((*tier)->Lookup(0, r, row), HotResult::kPinned) << r;
    StoreRow(0, r, want);
    ASSERT_EQ(0, std::memcmp(row, want, kRowBytes)) << r;
  }
}

}  // namespace
}  // namespace engram
