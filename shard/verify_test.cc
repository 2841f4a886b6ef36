#include "shard/verify.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/test_files.h"
#include "gtest/gtest.h"
#include "shard/import/importer.h"
#include "shard/shard_format.h"

namespace engram {
namespace {

namespace fs = std::filesystem;

// Shard 0 of 2 of a generated table, in both tail formats; tests that
// damage a shard work on a copy.
class VerifyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_TRUE(testing::MakeSmallTable(dir_->Sub("table")).ok());
    ASSERT_TRUE(testing::MakeSmallTable(dir_->Sub("other"), 300, /*seed=*/8).ok());
    for (TailFormat format : {TailFormat::kBlock, TailFormat::kCuckoo}) {
      ImportOptions o;
      o.table_dir = dir_->Sub("table");
      o.n_shards = 2;
      o.shard_index = 0;
      o.out_dir = ShardDir(format);
      o.tail_format = format;
      absl::StatusOr<ImportResult> r = ImportShard(o, nullptr);
      ASSERT_TRUE(r.ok()) << r.status();
      rows_ = r->rows_written;
    }
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string ShardDir(TailFormat format) {
    return dir_->Sub(absl::StrCat("shard-", TailFormatName(format)));
  }
  std::string Copy(TailFormat format) {
    const std::string dst = scratch_.Sub(TailFormatName(format));
    fs::copy(ShardDir(format), dst, fs::copy_options::recursive);
    return dst;
  }
  static VerifyReport Verify(const std::string& dir, const std::string& table = "") {
    absl::StatusOr<VerifyReport> r = VerifyShard({.shard_dir = dir, .table_dir = table});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : VerifyReport();
  }

  static testing::TempDir* dir_;
  static uint64_t rows_;
  testing::TempDir scratch_;
};

testing::TempDir* VerifyTest::dir_ = nullptr;
uint64_t VerifyTest::rows_ = 0;

TEST_F(VerifyTest, GoodShardMatchesShardJsonAndTheTable) {
  for (TailFormat format : {TailFormat::kBlock, TailFormat::kCuckoo}) {
    SCOPED_TRACE(TailFormatName(format));
    for (const std::string& table : {std::string(), dir_->Sub("table")}) {
      const VerifyReport r = Verify(ShardDir(format), table);
      EXPECT_TRUE(r.ok());
      EXPECT_EQ(r.rows, rows_);
      EXPECT_EQ(r.bad_rows, 0u);
      const std::vector<std::string> lines = r.Lines();
      ASSERT_EQ(lines.size(), 3u);  // two layers, then the verdict
      EXPECT_TRUE(absl::StartsWith(lines[0], "layer 0 (layer id 1): ")) << lines[0];
      EXPECT_TRUE(absl::StrContains(lines[1], "matches shard.json")) << lines[1];
      EXPECT_EQ(absl::StrContains(lines[1], "every readable row equals the table's"),
                !table.empty())
          << lines[1];
      EXPECT_EQ(lines[2], absl::StrCat("verify: ", rows_, " rows, all match"));
    }
  }
}

TEST_F(VerifyTest, DamagedSstNamesTheFirstBadRow) {
  const std::string dir = Copy(TailFormat::kBlock);
  std::string sst;
  uint64_t size = 0;
  for (const auto& e : fs::directory_iterator(dir + "/" + kShardDbDir)) {
    if (e.path().extension() == ".sst" && e.file_size() > size) {
      sst = e.path().string();
      size = e.file_size();
    }
  }
  ASSERT_TRUE(testing::FlipByte(sst, size / 3).ok());
  const VerifyReport r = Verify(dir, dir_->Sub("table"));
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.rows, rows_);
  EXPECT_GT(r.bad_rows, 0u);
  EXPECT_LT(r.bad_rows, rows_ / 4);  // one block's rows
  EXPECT_TRUE(absl::StrContains(r.first_bad_why, "Corruption")) << r.first_bad_why;
  const std::vector<std::string> lines = r.Lines();
  EXPECT_EQ(lines.back(),
            absl::StrCat("verify: ", r.bad_rows, " of ", rows_, " rows differ (first: layer ",
                         r.first_bad_layer, " row ", r.first_bad_row, ")"));
  EXPECT_TRUE(absl::StrContains(lines[r.first_bad_layer], "unreadable, checksum not comparable"))
      << lines[r.first_bad_layer];
  EXPECT_TRUE(absl::StrContains(lines[r.first_bad_layer],
                                absl::StrCat("first bad row ", r.first_bad_row, ": ")))
      << lines[r.first_bad_layer];
}

TEST_F(VerifyTest, ShardJsonChecksumThatDiffersIsNamed) {
  const std::string dir = Copy(TailFormat::kCuckoo);
  absl::StatusOr<ShardInfo> info = ShardInfo::Load(dir + "/" + kShardInfoFile);
  ASSERT_TRUE(info.ok());
  info->layers[0].checksum = "xxh3_64:0000000000000001";
  ASSERT_TRUE(info->Save(dir + "/" + kShardInfoFile).ok());
  const VerifyReport r = Verify(dir);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.bad_rows, 0u);
  const std::vector<std::string> lines = r.Lines();
  EXPECT_TRUE(absl::StrContains(lines[0], "differs from shard.json's xxh3_64:0000000000000001"))
      << lines[0];
  EXPECT_EQ(lines.back(),
            absl::StrCat("verify: ", rows_,
                         " rows, but the checksum of layer 0 differs from shard.json"));
}

TEST_F(VerifyTest, RowsUnequalToTheTableAreCounted) {
  // Same name, version and geometry, other rows: every row differs, and
  // the other table is itself sound.
  const VerifyReport r = Verify(ShardDir(TailFormat::kBlock), dir_->Sub("other"));
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.bad_rows, rows_);
  EXPECT_EQ(r.first_bad_layer, 0u);
  EXPECT_EQ(r.first_bad_row, 0u);
  EXPECT_EQ(r.first_bad_why, "differs from the table's row");
  for (const VerifyReport::Layer& l : r.layers) {
    EXPECT_TRUE(l.table_checked);
    EXPECT_TRUE(l.table_checksum_matches);
    EXPECT_EQ(l.differ_from_table, l.check.rows);
  }
}

TEST_F(VerifyTest, MissingShardOrForeignTableIsAnError) {
  EXPECT_EQ(VerifyShard({.shard_dir = scratch_.Sub("none"), .table_dir = ""}).status().code(),
            absl::StatusCode::kNotFound);
  // A table of another geometry.
  const std::string big = scratch_.Sub("big");
  ASSERT_TRUE(testing::MakeSmallTable(big, 400).ok());
  absl::StatusOr<VerifyReport> r =
      VerifyShard({.shard_dir = ShardDir(TailFormat::kBlock), .table_dir = big});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "is not this shard's table")) << r.status();
}

}  // namespace
}  // namespace engram
