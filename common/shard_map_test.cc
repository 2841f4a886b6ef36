#include "common/shard_map.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/testing/test_files.h"
#include "gtest/gtest.h"

namespace engram {
namespace {

ShardMap Example() {
  ShardMap m;
  m.table = "t";
  m.version = 3;
  m.n_shards = 3;
  m.layer_rows = {10, 2};
  m.row_bytes = {264, 66};
  return m;
}

TEST(ShardMapTest, RowsOnShardPartitionsEveryRow) {
  const ShardMap m = Example();
  EXPECT_EQ(m.RowsOnShard(0, 0), 4u);  // 0 3 6 9
  EXPECT_EQ(m.RowsOnShard(0, 1), 3u);  // 1 4 7
  EXPECT_EQ(m.RowsOnShard(0, 2), 3u);  // 2 5 8
  EXPECT_EQ(m.RowsOnShard(1, 1), 1u);
  EXPECT_EQ(m.RowsOnShard(1, 2), 0u);
  EXPECT_EQ(m.ShardOf(7), 1u);
  for (uint64_t rows = 1; rows < 40; ++rows) {
    ShardMap n = m;
    n.layer_rows = {rows};
    for (uint32_t shards = 1; shards < 7; ++shards) {
      n.n_shards = shards;
      uint64_t sum = 0;
      for (uint32_t s = 0; s < shards; ++s) sum += n.RowsOnShard(0, s);
      EXPECT_EQ(sum, rows) << rows << " rows over " << shards;
    }
  }
}

TEST(ShardMapTest, JsonRoundTripAndSaveLoad) {
  ShardMap m = Example();
  m.replicas = {{"a:1", "b:1"}, {"c:1"}, {"d:1"}};
  absl::StatusOr<ShardMap> back = ShardMap::FromJson(m.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->SameData(m));
  EXPECT_EQ(back->replicas, m.replicas);

  testing::TempDir dir;
  const std::string path = dir.Sub("shard_map.json");
  ASSERT_TRUE(m.Save(path).ok());
  absl::StatusOr<ShardMap> loaded = ShardMap::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->ToJson(), m.ToJson());
  EXPECT_EQ(ShardMap::Load(dir.Sub("absent.json")).status().code(), absl::StatusCode::kNotFound);
}

TEST(ShardMapTest, SameDataIgnoresReplicasOnly) {
  const ShardMap m = Example();
  ShardMap n = m;
  n.replicas = {{"x:1"}, {"y:1"}, {"z:1"}};
  EXPECT_TRUE(m.SameData(n));
  n.version = 4;
  EXPECT_FALSE(m.SameData(n));
  n = m;
  n.row_bytes[1] = 67;
  EXPECT_FALSE(m.SameData(n));
  n = m;
  n.n_shards = 4;
  EXPECT_FALSE(m.SameData(n));
}

TEST(ShardMapTest, ValidateNamesTheProblem) {
  struct Case {
    void (*mutate)(ShardMap&);
    const char* message;
  };
  const Case cases[] = {
      {[](ShardMap& m) { m.table.clear(); }, "table name"},
      {[](ShardMap& m) { m.version = 0; }, "version"},
      {[](ShardMap& m) { m.n_shards = 0; }, "n_shards"},
      {[](ShardMap& m) { m.row_bytes.pop_back(); }, "row_bytes has 1"},
      {[](ShardMap& m) { m.layer_rows[1] = 0; }, "layer_rows[1]"},
      {[](ShardMap& m) { m.row_bytes[0] = 0; }, "row_bytes[0]"},
      {[](ShardMap& m) { m.replicas = {{"a:1"}}; }, "replicas"},
  };
  for (const Case& c : cases) {
    ShardMap m = Example();
    c.mutate(m);
    absl::Status s = m.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s;
    EXPECT_FALSE(ShardMap::FromJson(m.ToJson()).ok());
  }
  EXPECT_FALSE(ShardMap::FromJson("{").ok());
  EXPECT_FALSE(ShardMap::FromJson(R"({"table":"t","version":-1})").ok());
}

TEST(ShardMapTest, KeysSortInLayerRowOrder) {
  std::vector<std::pair<uint32_t, uint64_t>> rows = {
      {0, 0}, {0, 1}, {0, 255}, {0, 256}, {0, (1ull << 48) - 1}, {1, 0}, {2, 7}};
  std::vector<std::string> encoded;
  for (auto [layer, row] : rows) {
    char k[kShardKeyBytes];
    EncodeShardKey(ShardKey(layer, row), k);
    EXPECT_EQ(DecodeShardKey(k), ShardKey(layer, row));
    encoded.emplace_back(k, sizeof(k));
  }
  EXPECT_TRUE(std::is_sorted(encoded.begin(), encoded.end()));
}

}  // namespace
}  // namespace engram
