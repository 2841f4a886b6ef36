#include "common/format/shard_map.h"

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

TEST(ShardMapTest, MalformedJsonIsNamed) {
  const struct {
    const char* what;
    const char* json;
    const char* message;
  } cases[] = {
      {"not JSON", "{", "shard map: not valid JSON"},
      {"an array", "[1]", "shard map: not a JSON object"},
      {"table a number", R"({"table":1})", "\"table\" must be a string"},
      {"version negative", R"({"table":"t","version":-1})",
       "\"version\" must be a non-negative integer"},
      {"n_shards over 32 bits", R"({"table":"t","version":1,"n_shards":4294967296})",
       "n_shards is too large"},
      // Was cast to uint32_t: 2^32 + 66 became 66 and the map was accepted.
      {"row_bytes over 32 bits",
       R"({"table":"t","version":1,"n_shards":2,"layer_rows":[10],"row_bytes":[4294967362]})",
       "\"row_bytes\"[0] = 4294967362 exceeds 4294967295"},
      {"layer_rows over 2^48",
       R"({"table":"t","version":1,"n_shards":2,"layer_rows":[281474976710657],"row_bytes":[1]})",
       "layer_rows[0] = 281474976710657 is outside 1..2^48"},
      {"replicas not arrays",
       R"({"table":"t","version":1,"n_shards":1,"layer_rows":[1],"row_bytes":[1],"replicas":[1]})",
       "\"replicas\" must be an array of arrays"},
      {"replica address a number",
       R"({"table":"t","version":1,"n_shards":1,"layer_rows":[1],"row_bytes":[1],)"
       R"("replicas":[[7070]]})",
       "replica addresses must be strings"},
  };
  for (const auto& c : cases) {
    const absl::StatusOr<ShardMap> m = ShardMap::FromJson(c.json);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument)
        << c.what << ": " << m.status();
    EXPECT_NE(m.status().message().find(c.message), std::string::npos)
        << c.what << ": " << m.status();
  }
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const absl::Status s =
      ShardMap::FromJson(R"({"table":"t","version":1,"n_shards":1,"layer_rows":[1],)"
                         R"("row_bytes":[1],"x":)" +
                         deep + "}")
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("JSON nested deeper than 64 levels"), std::string::npos) << s;
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
