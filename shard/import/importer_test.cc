#include "shard/import/importer.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/format/hot_profile.h"
#include "common/format/table.h"
#include "common/gen/table_gen.h"
#include "common/hash/engram_hash.h"
#include "common/testing/test_files.h"
#include "common/util/file_util.h"
#include "gtest/gtest.h"
#include "shard/import/testing/gguf_writer.h"
#include "shard/row_store.h"

namespace engram {
namespace {

namespace fs = std::filesystem;

class ImporterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_TRUE(testing::MakeSmallTable(TablePath()).ok());
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string TablePath() { return dir_->Sub("table"); }

  ImportOptions Options(uint32_t shards, uint32_t index, const std::string& out) {
    ImportOptions o;
    o.table_dir = TablePath();
    o.n_shards = shards;
    o.shard_index = index;
    o.out_dir = scratch_.Sub(out);
    return o;
  }

  // Reads every row of `shard_dir` through a RowStore and compares it with
  // the rows `read(layer, row, out)` gives.
  template <typename Read>
  void ExpectStoreHolds(const std::string& shard_dir, Read read) {
    absl::StatusOr<std::unique_ptr<RowStore>> store =
        RowStore::Open(shard_dir, RowStoreOptions{.reader_threads = 2});
    ASSERT_TRUE(store.ok()) << store.status();
    const ShardMap& map = (*store)->shard_map();
    const uint32_t shard = (*store)->shard_index();
    for (uint32_t l = 0; l < map.layer_rows.size(); ++l) {
      const uint32_t rb = map.row_bytes[l];
      const uint64_t n = map.RowsOnShard(l, shard);
      std::vector<uint8_t> got(n * rb), want(n * rb);
      std::vector<RowRef> refs;
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t row = shard + i * map.n_shards;
        refs.push_back({l, row, got.data() + i * rb});
        read(l, row, want.data() + i * rb);
      }
      ASSERT_TRUE((*store)->ReadRows(refs).ok());
      ASSERT_EQ(got, want) << shard_dir << " layer " << l;
    }
  }

  static testing::TempDir* dir_;
  testing::TempDir scratch_;
};

testing::TempDir* ImporterTest::dir_ = nullptr;

TEST_F(ImporterTest, ThreeShardsHoldEveryRowByteEqual) {
  absl::StatusOr<std::unique_ptr<TableReader>> table = TableReader::Open(TablePath());
  ASSERT_TRUE(table.ok()) << table.status();
  uint64_t written = 0;
  for (uint32_t i = 0; i < 3; ++i) {
    ImportOptions o = Options(3, i, absl::StrCat("shard", i));
    o.chunk_rows = 1000;  // not a multiple of the shard count
    uint64_t last_done = 0, total = 0;
    absl::StatusOr<ImportResult> r = ImportShard(o, [&](uint64_t d, uint64_t t) {
      EXPECT_GT(d, last_done);
      last_done = d;
      total = t;
    });
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->already_imported);
    EXPECT_EQ(last_done, (*table)->manifest().total_rows());
    EXPECT_EQ(total, last_done);
    written += r->rows_written;
    EXPECT_EQ(r->map.table, "shard-test");
    EXPECT_EQ(r->info.shard_index, i);
    EXPECT_FALSE(fs::exists(fs::path(o.out_dir) / kHotProfileFile));
    ExpectStoreHolds(o.out_dir, [&](uint32_t l, uint64_t row, uint8_t* out) {
      ASSERT_TRUE((*table)->ReadRow(static_cast<int>(l), row, out).ok());
    });
  }
  EXPECT_EQ(written, (*table)->manifest().total_rows());
}

TEST_F(ImporterTest, ManySmallSstFiles) {
  ImportOptions o = Options(2, 1, "small-ssts");
  o.sst_file_bytes = 64 << 10;
  absl::StatusOr<ImportResult> r = ImportShard(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->sst_files, 3);
  absl::StatusOr<std::unique_ptr<TableReader>> table = TableReader::Open(TablePath());
  ASSERT_TRUE(table.ok());
  ExpectStoreHolds(o.out_dir, [&](uint32_t l, uint64_t row, uint8_t* out) {
    ASSERT_TRUE((*table)->ReadRow(static_cast<int>(l), row, out).ok());
  });
}

TEST_F(ImporterTest, CuckooTailHoldsEveryRowOneTableALayerOrMore) {
  absl::StatusOr<std::unique_ptr<TableReader>> table = TableReader::Open(TablePath());
  ASSERT_TRUE(table.ok());
  for (uint64_t file_bytes : {uint64_t{256} << 20, uint64_t{32} << 10}) {
    ImportOptions o = Options(2, 1, absl::StrCat("cuckoo-", file_bytes));
    o.tail_format = TailFormat::kCuckoo;
    o.sst_file_bytes = file_bytes;
    absl::StatusOr<ImportResult> r = ImportShard(o, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->info.tail_format, TailFormat::kCuckoo);
    // Rows: one table per layer at least (values of one size each), more
    // when a layer overflows a memtable; plus the identity record's.
    const int layers = static_cast<int>(r->map.layer_rows.size());
    if (file_bytes > (uint64_t{1} << 20)) {
      EXPECT_EQ(r->sst_files, layers + 1);
    } else {
      EXPECT_GT(r->sst_files, layers + 1);
    }
    ExpectStoreHolds(o.out_dir, [&](uint32_t l, uint64_t row, uint8_t* out) {
      ASSERT_TRUE((*table)->ReadRow(static_cast<int>(l), row, out).ok());
    });
    absl::StatusOr<ShardInfo> info = ShardInfo::Load(o.out_dir + "/" + kShardInfoFile);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->tail_format, TailFormat::kCuckoo);
    // Another tail format into the same --out is another import: refused.
    o.tail_format = TailFormat::kBlock;
    r = ImportShard(o, nullptr);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    EXPECT_NE(r.status().message().find("tail format"), std::string::npos) << r.status();
  }
}

TEST_F(ImporterTest, SecondImportIsIdempotentAndDifferentOneRefused) {
  const ImportOptions o = Options(3, 2, "again");
  absl::StatusOr<ImportResult> first = ImportShard(o, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string info_path = o.out_dir + "/" + kShardInfoFile;
  absl::StatusOr<std::string> info_before = ReadFileToString(info_path);
  const auto mtime_before = fs::last_write_time(info_path);

  absl::StatusOr<ImportResult> second = ImportShard(o, nullptr);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->already_imported);
  EXPECT_EQ(second->info.source_checksum, first->info.source_checksum);
  EXPECT_EQ(fs::last_write_time(info_path), mtime_before);

  for (ImportOptions other : {Options(3, 1, "again"), Options(4, 2, "again")}) {
    absl::StatusOr<ImportResult> r = ImportShard(other, nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(r.status().message().find("pick another --out or delete it"), std::string::npos)
        << r.status();
  }
  // The refused imports left the shard as it was, and nothing else behind.
  EXPECT_EQ(*ReadFileToString(info_path), *info_before);
  EXPECT_TRUE(RowStore::Open(o.out_dir, {}).ok());
  EXPECT_EQ(std::distance(fs::directory_iterator(scratch_.path()), fs::directory_iterator()), 1);
}

TEST_F(ImporterTest, RefusesForeignOutAndAcceptsEmptyDir) {
  ImportOptions o = Options(2, 0, "foreign");
  fs::create_directories(o.out_dir);
  std::ofstream(o.out_dir + "/notes.txt") << "mine";
  absl::StatusOr<ImportResult> r = ImportShard(o, nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_TRUE(fs::exists(o.out_dir + "/notes.txt"));

  o = Options(2, 0, "empty/");  // a trailing slash names the same dir
  fs::create_directories(o.out_dir);
  r = ImportShard(o, nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
}

TEST_F(ImporterTest, BadOptionsAreNamed) {
  ImportOptions o = Options(3, 3, "x");
  EXPECT_NE(ImportShard(o, nullptr).status().message().find("--shard-index 3"), std::string::npos);
  o = Options(0, 0, "x");
  EXPECT_EQ(ImportShard(o, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options(1, 0, "x");
  o.gguf_path = "also.gguf";
  EXPECT_EQ(ImportShard(o, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options(1, 0, "no/such/parent/x");
  EXPECT_EQ(ImportShard(o, nullptr).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ImporterTest, CorruptTableIsDataLossAndLeavesNothing) {
  testing::TempDir copy;
  const std::string table = copy.Sub("table");
  fs::copy(TablePath(), table);
  absl::StatusOr<std::unique_ptr<TableReader>> reader = TableReader::Open(table);
  ASSERT_TRUE(reader.ok());
  const SafetensorsHeader& h = (*reader)->safetensors_header();
  const SafetensorsTensor* w =
      h.Find(EngramWeightTensorName((*reader)->manifest().layers[1].layer_id));
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(testing::FlipByte((*reader)->rows_path(), h.data_start + w->begin + 777).ok());

  // Either tail format; into a new --out, or into an empty one that stays
  // empty.
  for (TailFormat format : {TailFormat::kBlock, TailFormat::kCuckoo}) {
    for (bool empty_out : {false, true}) {
      SCOPED_TRACE(absl::StrCat(TailFormatName(format), " empty out ", empty_out));
      ImportOptions o = Options(2, 1, "corrupt");
      o.table_dir = table;
      o.tail_format = format;
      if (empty_out) {
        ASSERT_TRUE(fs::create_directory(o.out_dir));
      }
      absl::StatusOr<ImportResult> r = ImportShard(o, nullptr);
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
      EXPECT_NE(r.status().message().find("rows of layer 1 (layer id 14)"), std::string::npos)
          << r.status();
      EXPECT_NE(r.status().message().find("the table is corrupt"), std::string::npos) << r.status();
      if (empty_out) {
        EXPECT_TRUE(fs::is_empty(o.out_dir));  // untouched
        fs::remove(o.out_dir);
      }
      EXPECT_TRUE(fs::is_empty(scratch_.path()));  // no shard, no temp dir
    }
  }
}

TEST_F(ImporterTest, ProfileCountsTheTraceAccessesOfOwnedRows) {
  absl::StatusOr<TableManifest> m = TableManifest::Load(TablePath());
  ASSERT_TRUE(m.ok());
  const HashLayout& layout = m->layout;
  // Two lines; the second repeats a prefix of the first, so its rows count
  // twice.
  const std::vector<std::vector<int64_t>> lines = {{5, 17, 300, 4000, 17}, {5, 17}};
  const std::string trace = scratch_.Sub("trace.txt");
  {
    std::ofstream f(trace);
    f << "5 17 300 4000 17\n\n5  17\n";
  }
  absl::StatusOr<std::unique_ptr<NgramHasher>> hasher = NgramHasher::Create(layout);
  ASSERT_TRUE(hasher.ok());
  const uint32_t n_shards = 2, shard = 1;
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> want;
  for (const auto& ids : lines) {
    SequenceState seq;
    std::vector<RowId> rows(ids.size() * (*hasher)->ids_per_position());
    ASSERT_TRUE((*hasher)->Hash(seq, 0, ids, {}, rows.data()).ok());
    for (size_t t = 0; t < ids.size(); ++t) {
      for (int l = 0; l < layout.n_layers(); ++l) {
        for (int c = 0; c < layout.n_cols(); ++c) {
          const RowId r = rows[(t * layout.n_layers() + l) * layout.n_cols() + c];
          if (r % n_shards == shard) ++want[{static_cast<uint32_t>(l), r}];
        }
      }
    }
  }
  ImportOptions o = Options(n_shards, shard, "profiled");
  o.profile_trace = trace;
  absl::StatusOr<ImportResult> r = ImportShard(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->profile_rows, want.size());
  absl::StatusOr<ShardMap> map = ShardMap::Load(o.out_dir + "/" + kShardMapFile);
  ASSERT_TRUE(map.ok());
  absl::StatusOr<std::vector<HotProfileEntry>> got =
      ReadHotProfile(o.out_dir + "/" + kHotProfileFile, *map, shard);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want.size());
  uint64_t prev = UINT64_MAX;
  for (const HotProfileEntry& e : *got) {
    EXPECT_EQ(e.count, (want[{e.layer, e.row}])) << e.layer << "/" << e.row;
    EXPECT_LE(e.count, prev);
    prev = e.count;
  }
  EXPECT_GE(got->front().count, 2u);

  // A different trace makes it a different import.
  std::ofstream(trace, std::ios::app) << "1 2 3\n";
  EXPECT_EQ(ImportShard(o, nullptr).status().code(), absl::StatusCode::kFailedPrecondition);
  // A bad token names the line.
  std::ofstream(trace, std::ios::app) << "1 x 3\n";
  o.out_dir = scratch_.Sub("profiled2");
  absl::Status bad = ImportShard(o, nullptr).status();
  EXPECT_NE(bad.message().find("trace.txt:5: token 'x'"), std::string::npos) << bad;
  EXPECT_FALSE(fs::exists(o.out_dir));
}

TEST_F(ImporterTest, ImportsGguf) {
  absl::StatusOr<TableManifest> m = TableManifest::Load(TablePath());
  ASSERT_TRUE(m.ok());
  const std::string gguf = scratch_.Sub("model.gguf");
  ASSERT_TRUE(testing::EngramGguf(m->layout, 5, 16384).Write(gguf).ok());
  for (uint32_t i = 0; i < 2; ++i) {
    ImportOptions o;
    o.gguf_path = gguf;
    o.version = 4;
    o.n_shards = 2;
    o.shard_index = i;
    o.out_dir = scratch_.Sub(absl::StrCat("g", i));
    absl::StatusOr<ImportResult> r = ImportShard(o, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->map.table, "test-engram");
    EXPECT_EQ(r->map.version, 4u);
    EXPECT_EQ(r->map.row_bytes, std::vector<uint32_t>(m->layout.n_layers(), 264));
    ExpectStoreHolds(o.out_dir, [](uint32_t l, uint64_t row, uint8_t* out) {
      GenerateRow(5, static_cast<int>(l), row, 256, 32, out);
    });
    // Idempotent too (the GGUF has no checksums: they are recomputed).
    absl::StatusOr<ImportResult> again = ImportShard(o, nullptr);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(again->already_imported);
  }
  // Different rows under the same name and version: refused.
  ASSERT_TRUE(testing::EngramGguf(m->layout, 6, 16384).Write(gguf).ok());
  ImportOptions o;
  o.gguf_path = gguf;
  o.version = 4;
  o.n_shards = 2;
  o.out_dir = scratch_.Sub("g0");
  absl::Status s = ImportShard(o, nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("different data"), std::string::npos) << s;
}

}  // namespace
}  // namespace engram
