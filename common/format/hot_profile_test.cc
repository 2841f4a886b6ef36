// The hot-row profile format: round trip, and malformed files, each with
// the status its case names (docs/reliability.md, "Malformed input").
#include "common/format/hot_profile.h"

#include <cstdint>
#include <string>
#include <vector>

#include "common/testing/test_files.h"
#include "common/util/file_util.h"
#include "gtest/gtest.h"

namespace engram {
namespace {

ShardMap Map() {
  ShardMap m;
  m.table = "t";
  m.version = 1;
  m.n_shards = 3;
  m.layer_rows = {1000, 37};
  m.row_bytes = {66, 66};
  return m;
}

// Shard 1's rows 1, 4, 7 of layer 0 and 1 of layer 1, in file order.
std::vector<HotProfileEntry> Entries() { return {{0, 1, 9}, {0, 4, 9}, {1, 1, 5}, {0, 7, 2}}; }

void Set64(std::string* s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i, v >>= 8) (*s)[at + i] = static_cast<char>(v & 0xff);
}

TEST(HotProfile, WriteReadRoundTrip) {
  testing::TempDir dir;
  const std::string path = dir.Sub("hot_profile.bin");
  std::vector<HotProfileEntry> shuffled = Entries();
  std::swap(shuffled[0], shuffled[3]);
  ASSERT_TRUE(WriteHotProfile(path, shuffled).ok());
  absl::StatusOr<std::vector<HotProfileEntry>> read = ReadHotProfile(path, Map(), 1);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, Entries());
  EXPECT_EQ(ReadHotProfile(dir.Sub("absent"), Map(), 1).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(HotProfileMalformed, EveryCaseGetsItsStatus) {
  const std::string good = EncodeHotProfile(Entries());
  ASSERT_TRUE(ParseHotProfile(good, Map(), 1, "p").ok());
  auto with = [&](size_t at, uint64_t v, int bytes = 8) {
    std::string s = good;
    for (int i = 0; i < bytes; ++i, v >>= 8) s[at + i] = static_cast<char>(v & 0xff);
    return s;
  };
  std::string swapped = good;  // entries 0 and 3 swapped: out of order
  swapped.replace(16, 20, good.substr(16 + 3 * 20, 20));
  swapped.replace(16 + 3 * 20, 20, good.substr(16, 20));
  std::string twice = good;  // entry 1 repeats entry 0
  twice.replace(16 + 20, 20, good.substr(16, 20));
  std::string counted = good;
  Set64(&counted, 8, 3);
  const struct {
    const char* what;
    std::string data;
    const char* message;
  } cases[] = {
      {"empty file", "", "not a hot profile (bad magic or too short)"},
      {"bad magic", "XGHP" + good.substr(4), "not a hot profile (bad magic or too short)"},
      {"version 2", with(4, 2, 4), "version 2 is not supported"},
      {"truncated inside an entry", good.substr(0, good.size() - 1),
       "header says 4 entries, file has 95 bytes"},
      // 16 + n * 20 wraps for this count; it is checked by division first.
      {"count 2^64 - 1", with(8, ~uint64_t{0}), "header says 18446744073709551615 entries"},
      {"count smaller than the entries", counted, "header says 3 entries, file has 96 bytes"},
      {"row of another shard", with(16 + 4, 2), "entry 0 (layer 0 row 2) is not a row of shard 1"},
      {"row past its layer", with(16 + 4, 1000), "entry 0 (layer 0 row 1000) is not a row"},
      {"layer the map lacks", with(16, 2, 4), "entry 0 (layer 2 row 1) is not a row"},
      {"entries out of order", swapped, "entry 1 is out of order"},
      {"a row listed twice", twice, "entry 1 is out of order"},
  };
  testing::TempDir dir;
  for (const auto& c : cases) {
    const absl::StatusOr<std::vector<HotProfileEntry>> p = ParseHotProfile(c.data, Map(), 1, "p");
    EXPECT_EQ(p.status().code(), absl::StatusCode::kDataLoss) << c.what << ": " << p.status();
    EXPECT_NE(p.status().message().find(c.message), std::string::npos)
        << c.what << ": " << p.status();
    // The file reader checks the whole file too, even past the one entry it keeps.
    const std::string path = dir.Sub("hot_profile.bin");
    ASSERT_TRUE(WriteFileAtomically(path, c.data).ok());
    const absl::StatusOr<std::vector<HotProfileEntry>> r = ReadHotProfile(path, Map(), 1, 1);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << c.what << ": " << r.status();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << c.what << ": " << r.status();
  }
}

// A profile larger than the reader's 1 MiB chunk: entries straddle chunks.
TEST(HotProfile, ReadKeepsTheHottestAndChecksEveryChunk) {
  ShardMap map = Map();
  map.layer_rows = {400000, 37};
  std::vector<HotProfileEntry> entries;
  for (uint64_t i = 0; i < 110000; ++i) entries.push_back({0, 3 * i + 1, 200000 - i});
  const std::string good = EncodeHotProfile(entries);
  ASSERT_GT(good.size(), size_t{2} << 20);
  testing::TempDir dir;
  const std::string path = dir.Sub("hot_profile.bin");
  ASSERT_TRUE(WriteFileAtomically(path, good).ok());
  absl::StatusOr<std::vector<HotProfileEntry>> all = ReadHotProfile(path, map, 1);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, entries);
  absl::StatusOr<std::vector<HotProfileEntry>> head = ReadHotProfile(path, map, 1, 10);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(*head, std::vector<HotProfileEntry>(entries.begin(), entries.begin() + 10));
  // The entry across the second chunk's end (2 MiB: its bytes 2097152 - 16
  // .. + 4) names a row of shard 0: caught though only 10 entries are kept.
  const size_t straddling = ((size_t{2} << 20) - 16) / 20;
  ASSERT_GT(16 + (straddling + 1) * 20, size_t{2} << 20);
  std::string bad = good;
  Set64(&bad, 16 + straddling * 20 + 4, 3 * straddling);
  ASSERT_TRUE(WriteFileAtomically(path, bad).ok());
  absl::StatusOr<std::vector<HotProfileEntry>> r = ReadHotProfile(path, map, 1, 10);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find("entry " + std::to_string(straddling) + " (layer 0 row "),
            std::string::npos)
      << r.status();
}

TEST(HotProfileMalformed, AnInvalidMapIsNamedNotDividedBy) {
  // ShardOf(row) is row % n_shards: with 0 shards that was a SIGFPE.
  ShardMap map = Map();
  map.n_shards = 0;
  const absl::StatusOr<std::vector<HotProfileEntry>> p =
      ParseHotProfile(EncodeHotProfile(Entries()), map, 1, "p");
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
  EXPECT_NE(p.status().message().find("checked against an invalid shard map: n_shards must be"),
            std::string::npos)
      << p.status();
}

}  // namespace
}  // namespace engram
