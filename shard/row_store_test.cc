#include "shard/row_store.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/format/table.h"
#include "common/testing/test_files.h"
#include "common/util/file_util.h"
#include "gtest/gtest.h"
#include "shard/import/importer.h"
#include "shard/shard_format.h"
#include "shard/uring_file_system.h"

namespace engram {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kShards = 3;

// One generated table imported into 3 shards, shared by the suite; tests
// that damage a shard work on a copy.
class RowStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_TRUE(testing::MakeSmallTable(dir_->Sub("table")).ok());
    for (TailFormat format : {TailFormat::kBlock, TailFormat::kCuckoo}) {
      for (uint32_t i = 0; i < kShards; ++i) {
        ImportOptions o;
        o.table_dir = dir_->Sub("table");
        o.n_shards = kShards;
        o.shard_index = i;
        o.out_dir = ShardDir(i, format);
        o.sst_file_bytes = 256 << 10;
        o.tail_format = format;
        absl::StatusOr<ImportResult> r = ImportShard(o, nullptr);
        ASSERT_TRUE(r.ok()) << r.status();
      }
    }
    absl::StatusOr<std::unique_ptr<TableReader>> t = TableReader::Open(dir_->Sub("table"));
    ASSERT_TRUE(t.ok());
    table_ = t->release();
  }
  static void TearDownTestSuite() {
    delete table_;
    delete dir_;
  }
  static std::string ShardDir(uint32_t i, TailFormat format = TailFormat::kBlock) {
    return dir_->Sub(absl::StrCat(TailFormatName(format), "-shard", i));
  }
  // A private copy of shard i.
  std::string CopyShard(uint32_t i, TailFormat format = TailFormat::kBlock) {
    const std::string dst = scratch_.Sub(absl::StrCat("copy", i, TailFormatName(format)));
    fs::copy(ShardDir(i, format), dst, fs::copy_options::recursive);
    return dst;
  }
  static std::unique_ptr<RowStore> Open(const std::string& dir,
                                        RowStoreOptions o = {.reader_threads = 4}) {
    absl::StatusOr<std::unique_ptr<RowStore>> s = RowStore::Open(dir, o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
  // Every row of `shard` in a shuffled order, with duplicates.
  static std::vector<std::pair<uint32_t, uint64_t>> ShuffledRows(uint32_t shard, uint64_t seed) {
    std::vector<std::pair<uint32_t, uint64_t>> rows;
    const TableManifest& m = table_->manifest();
    for (uint32_t l = 0; l < m.layers.size(); ++l) {
      for (uint64_t r = shard; r < m.layers[l].rows; r += kShards) rows.push_back({l, r});
    }
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 100; ++i) rows.push_back(rows[rng() % rows.size()]);
    std::shuffle(rows.begin(), rows.end(), rng);
    return rows;
  }
  // Refs into `buf` (sized here) for `rows`; `want` gets the table's bytes.
  static std::vector<RowRef> Refs(const std::vector<std::pair<uint32_t, uint64_t>>& rows,
                                  std::vector<uint8_t>* buf, std::vector<uint8_t>* want) {
    const uint32_t rb = static_cast<uint32_t>(table_->manifest().layers[0].row_bytes);
    buf->assign(rows.size() * rb, 0);
    want->assign(rows.size() * rb, 0);
    std::vector<RowRef> refs;
    for (size_t i = 0; i < rows.size(); ++i) {
      refs.push_back({rows[i].first, rows[i].second, buf->data() + i * rb});
      EXPECT_TRUE(
          table_->ReadRow(static_cast<int>(rows[i].first), rows[i].second, want->data() + i * rb)
              .ok());
    }
    return refs;
  }

  static testing::TempDir* dir_;
  static TableReader* table_;
  testing::TempDir scratch_;
};

testing::TempDir* RowStoreTest::dir_ = nullptr;
TableReader* RowStoreTest::table_ = nullptr;

TEST_F(RowStoreTest, ReadsEveryRowOfEveryShardInAnyOrder) {
  for (TailFormat format : {TailFormat::kBlock, TailFormat::kCuckoo}) {
    for (uint32_t i = 0; i < kShards; ++i) {
      std::unique_ptr<RowStore> store = Open(ShardDir(i, format), {.reader_threads = 4});
      ASSERT_NE(store, nullptr);
      EXPECT_EQ(store->shard_index(), i);
      EXPECT_EQ(store->shard_map().n_shards, kShards);
      EXPECT_TRUE(absl::StartsWith(store->tail_access(), "MultiGet on 4 reader threads"))
          << store->tail_access();
      std::vector<uint8_t> got, want;
      std::vector<RowRef> refs = Refs(ShuffledRows(i, i), &got, &want);
      ASSERT_TRUE(store->ReadRows(refs).ok());
      EXPECT_EQ(got, want) << TailFormatName(format) << " shard " << i;
    }
  }
}

TEST_F(RowStoreTest, CuckooTailIsReadThroughMmapOnly) {
  // mmap_reads off is overridden (CuckooTables need the mapping) ...
  std::unique_ptr<RowStore> store =
      Open(ShardDir(2, TailFormat::kCuckoo), {.mmap_reads = false, .reader_threads = 2});
  ASSERT_NE(store, nullptr);
  std::vector<uint8_t> got, want;
  std::vector<RowRef> refs = Refs(ShuffledRows(2, 4), &got, &want);
  ASSERT_TRUE(store->ReadRows(refs).ok());
  EXPECT_EQ(got, want);
  // ... and O_DIRECT is refused, saying what to do.
  absl::StatusOr<std::unique_ptr<RowStore>> direct =
      RowStore::Open(ShardDir(2, TailFormat::kCuckoo), {.direct_io = true});
  EXPECT_EQ(direct.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(direct.status().message().find("--tail-format block"), std::string::npos)
      << direct.status();
}

TEST_F(RowStoreTest, CuckooRowChecksumCatchesADamagedRow) {
  const std::string dir = CopyShard(1, TailFormat::kCuckoo);
  // Find row (layer 0, row 4) of shard 1 in the table files and flip a byte
  // in the middle of it: CuckooTables have no block checksums.
  const uint32_t rb = static_cast<uint32_t>(table_->manifest().layers[0].row_bytes);
  std::vector<uint8_t> row(rb);
  ASSERT_TRUE(table_->ReadRow(0, 4, row.data()).ok());
  bool flipped = false;
  for (const auto& e : fs::directory_iterator(dir + "/" + kShardDbDir)) {
    if (e.path().extension() != ".sst") continue;
    absl::StatusOr<std::string> bytes = ReadFileToString(e.path().string());
    ASSERT_TRUE(bytes.ok());
    const size_t at = bytes->find(std::string(row.begin(), row.end()));
    if (at == std::string::npos) continue;
    ASSERT_TRUE(testing::FlipByte(e.path().string(), at + rb / 2).ok());
    flipped = true;
  }
  ASSERT_TRUE(flipped);
  {
    std::unique_ptr<RowStore> store = Open(dir, {.reader_threads = 2});
    ASSERT_NE(store, nullptr);
    std::vector<uint8_t> got(rb), want(rb);
    const RowRef damaged[] = {{0, 1, got.data()}, {0, 4, got.data()}};
    absl::Status s = store->ReadRows(damaged);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find("layer 0 row 4 fails its row checksum"), std::string::npos) << s;
    // Its neighbours are intact.
    for (uint64_t r : {1, 7, 10}) {
      const RowRef ok[] = {{0, r, got.data()}};
      ASSERT_TRUE(store->ReadRows(ok).ok()) << r;
      ASSERT_TRUE(table_->ReadRow(0, r, want.data()).ok());
      EXPECT_EQ(got, want) << r;
    }
  }
}

TEST_F(RowStoreTest, ShardJsonDecidesTheTailFormat) {
  // Written before the choice existed: no tail_format means block.
  std::string dir = CopyShard(0);
  const std::string info_path = dir + "/" + kShardInfoFile;
  absl::StatusOr<std::string> text = ReadFileToString(info_path);
  ASSERT_TRUE(text.ok());
  const size_t at = text->find(",\n    \"tail_format\": \"block\"");
  ASSERT_NE(at, std::string::npos) << *text;
  std::string old = *text;
  old.erase(at, std::string(",\n    \"tail_format\": \"block\"").size());
  ASSERT_TRUE(WriteFileAtomically(info_path, old).ok());
  EXPECT_NE(Open(dir), nullptr);
  // A shard.json claiming a cuckoo tail over block tables is refused.
  absl::StatusOr<ShardInfo> info = ShardInfo::Load(info_path);
  ASSERT_TRUE(info.ok());
  info->tail_format = TailFormat::kCuckoo;
  ASSERT_TRUE(info->Save(info_path).ok());
  absl::StatusOr<std::unique_ptr<RowStore>> s = RowStore::Open(dir, {});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_NE(s.status().message().find("cuckoo tail"), std::string::npos) << s.status();
  // An unknown format is named.
  ASSERT_TRUE(
      WriteFileAtomically(info_path, absl::StrReplaceAll(*text, {{"\"block\"", "\"lsm\""}})).ok());
  s = RowStore::Open(dir, {});
  EXPECT_NE(s.status().message().find("tail format 'lsm'"), std::string::npos) << s.status();
}

// A stat of the store, -1 when it has none of that name.
double Stat(const RowStore& store, const std::string& name) {
  for (const auto& [n, v] : store.Stats()) {
    if (n == name) return v;
  }
  return -1;
}

// Every row of `shard` once, in key order.
std::vector<std::pair<uint32_t, uint64_t>> RowsInKeyOrder(const TableManifest& m, uint32_t shard) {
  std::vector<std::pair<uint32_t, uint64_t>> rows;
  for (uint32_t l = 0; l < m.layers.size(); ++l) {
    for (uint64_t r = shard; r < m.layers[l].rows; r += kShards) rows.push_back({l, r});
  }
  return rows;
}

TEST_F(RowStoreTest, DirectIoReadsTheSameBytes) {
  // Every row, and every 200th row in key order: rows far enough apart
  // (13 KB of 66-byte rows) that each is in a block of its own, none next to
  // another (RocksDB reads adjacent blocks at once).
  const std::vector<std::pair<uint32_t, uint64_t>> all = RowsInKeyOrder(table_->manifest(), 1);
  std::vector<std::pair<uint32_t, uint64_t>> sparse;
  for (size_t i = 0; i < all.size(); i += 200) sparse.push_back(all[i]);
  ASSERT_GE(sparse.size(), 16u);
  for (bool uring : {true, false}) {
    SCOPED_TRACE(absl::StrCat("uring_reads ", uring));
    std::unique_ptr<RowStore> store =
        Open(ShardDir(1),
             {.direct_io = true, .uring_reads = uring, .reader_threads = 2, .multiget_batch = 7});
    ASSERT_NE(store, nullptr);
    for (const auto& rows : {ShuffledRows(1, 9), sparse}) {
      std::vector<uint8_t> got, want;
      std::vector<RowRef> refs = Refs(rows, &got, &want);
      ASSERT_TRUE(store->ReadRows(refs).ok());
      EXPECT_EQ(got, want);
    }
    // Through rings where the process may make them: a MultiGet of 7 of
    // the sparse rows submits its 7 block reads at once.
    const bool rings = uring && UringAvailable();
    EXPECT_EQ(absl::StrContains(store->tail_access(), "through io_uring"), rings)
        << store->tail_access();
    if (rings) {
      EXPECT_GT(Stat(*store, "uring_reads"), Stat(*store, "uring_submissions"));
    } else {
      EXPECT_LE(Stat(*store, "uring_reads"), 0);
    }
  }
}

TEST_F(RowStoreTest, ScanRowsReadsTheSameBytesInKeyOrder) {
  for (TailFormat format : {TailFormat::kBlock, TailFormat::kCuckoo}) {
    for (bool direct_io : {false, true}) {
      if (format == TailFormat::kCuckoo && direct_io) continue;  // refused at Open
      SCOPED_TRACE(absl::StrCat(TailFormatName(format), " direct_io ", direct_io));
      std::unique_ptr<RowStore> store = Open(ShardDir(2, format), {.direct_io = direct_io});
      ASSERT_NE(store, nullptr);
      const std::vector<std::pair<uint32_t, uint64_t>> all = RowsInKeyOrder(table_->manifest(), 2);
      std::vector<uint8_t> got, want;
      std::vector<RowRef> refs = Refs(all, &got, &want);
      ASSERT_TRUE(store->ScanRows(refs).ok());
      EXPECT_EQ(got, want);
      // A scan with gaps, across the layer boundary, and of one row.
      std::vector<std::pair<uint32_t, uint64_t>> some;
      for (size_t i = 0; i < all.size(); i += 7) some.push_back(all[i]);
      refs = Refs(some, &got, &want);
      ASSERT_TRUE(store->ScanRows(refs).ok());
      EXPECT_EQ(got, want);
      refs = Refs({all.back()}, &got, &want);
      ASSERT_TRUE(store->ScanRows(refs).ok());
      EXPECT_EQ(got, want);
    }
  }
}

TEST_F(RowStoreTest, ScanRowsRefusesRefsOutOfOrder) {
  std::unique_ptr<RowStore> store = Open(ShardDir(0));
  ASSERT_NE(store, nullptr);
  std::vector<uint8_t> got, want;
  for (const std::vector<std::pair<uint32_t, uint64_t>>& rows :
       {std::vector<std::pair<uint32_t, uint64_t>>{{0, 6}, {0, 3}},
        std::vector<std::pair<uint32_t, uint64_t>>{{0, 3}, {0, 3}},
        std::vector<std::pair<uint32_t, uint64_t>>{{1, 0}, {0, 9}}}) {
    std::vector<RowRef> refs = Refs(rows, &got, &want);
    const absl::Status s = store->ScanRows(refs);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "refs must ascend")) << s;
  }
  // A row of another shard is refused as ReadRows refuses it.
  std::vector<RowRef> refs = Refs({{0, 1}}, &got, &want);
  EXPECT_EQ(store->ScanRows(refs).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RowStoreTest, ConcurrentAsyncAndBlockingReads) {
  for (TailFormat format : {TailFormat::kBlock, TailFormat::kCuckoo}) {
    SCOPED_TRACE(TailFormatName(format));
    std::unique_ptr<RowStore> store = Open(ShardDir(0, format));
    ASSERT_NE(store, nullptr);
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int round = 0; round < 5; ++round) {
          auto rows = ShuffledRows(0, 100 * t + round);
          rows.resize(1 + (round * 997) % rows.size());
          std::vector<uint8_t> got, want;
          std::vector<RowRef> refs = Refs(rows, &got, &want);
          absl::Status status;
          if (round % 2 == 0) {
            status = store->ReadRows(refs);
          } else {
            absl::Notification done;
            std::atomic<int> calls{0};
            store->ReadRowsAsync(refs, [&](absl::Status s) {
              status = s;
              ++calls;
              done.Notify();
            });
            done.WaitForNotification();
            if (calls != 1) ++failures;
          }
          if (!status.ok() || got != want) ++failures;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(failures, 0);
  }
}

// A request whose deadline has passed reads nothing more from disk: one
// that waited behind another for the only reader, and one already late.
TEST_F(RowStoreTest, ReadsStopAtTheDeadline) {
  std::unique_ptr<RowStore> store = Open(ShardDir(0), {.reader_threads = 1});
  ASSERT_NE(store, nullptr);
  auto rows = ShuffledRows(0, 9);
  std::vector<std::pair<uint32_t, uint64_t>> busy_rows;
  while (busy_rows.size() < 60000) busy_rows.insert(busy_rows.end(), rows.begin(), rows.end());
  std::vector<uint8_t> busy_got, busy_want, late_got, late_want;
  std::vector<RowRef> busy = Refs(busy_rows, &busy_got, &busy_want);
  rows.resize(std::min<size_t>(rows.size(), 1000));
  std::vector<RowRef> late = Refs(rows, &late_got, &late_want);
  const double keys_before = Stat(*store, "rocksdb_multiget_keys");
  absl::Status busy_status, late_status;
  absl::Notification busy_done, late_done;
  store->ReadRowsAsync(busy, [&](absl::Status s) {
    busy_status = s;
    busy_done.Notify();
  });
  // 1 ms: far less than 60,000 reads take on one thread.
  store->ReadRowsAsync(
      late,
      [&](absl::Status s) {
        late_status = s;
        late_done.Notify();
      },
      absl::Now() + absl::Milliseconds(1));
  busy_done.WaitForNotification();
  late_done.WaitForNotification();
  EXPECT_TRUE(busy_status.ok()) << busy_status;
  EXPECT_EQ(busy_got, busy_want);
  EXPECT_EQ(late_status.code(), absl::StatusCode::kDeadlineExceeded) << late_status;
  EXPECT_NE(late_status.message().find("deadline passed"), std::string::npos) << late_status;
  EXPECT_EQ(Stat(*store, "expired_rows"), static_cast<double>(late.size()));
  EXPECT_EQ(Stat(*store, "rocksdb_multiget_keys") - keys_before, static_cast<double>(busy.size()));

  absl::Notification past_done;
  store->ReadRowsAsync(
      late,
      [&](absl::Status s) {
        late_status = s;
        past_done.Notify();
      },
      absl::InfinitePast());
  past_done.WaitForNotification();
  EXPECT_EQ(late_status.code(), absl::StatusCode::kDeadlineExceeded) << late_status;
  EXPECT_EQ(Stat(*store, "expired_rows"), 2.0 * static_cast<double>(late.size()));
}

TEST_F(RowStoreTest, RefusesRowsOfOtherShards) {
  std::unique_ptr<RowStore> store = Open(ShardDir(2));
  ASSERT_NE(store, nullptr);
  uint8_t buf[66];
  const RowRef other[] = {{0, 2, buf}, {0, 4, buf}};
  absl::Status s = store->ReadRows(other);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 0 row 4"), std::string::npos) << s;
  const RowRef bad_layer[] = {{9, 2, buf}};
  EXPECT_EQ(store->ReadRows(bad_layer).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(store->ReadRows({}).ok());
}

// The largest SST file of a shard directory.
std::string LargestSst(const std::string& dir, uint64_t* size) {
  std::string sst;
  *size = 0;
  for (const auto& e : fs::directory_iterator(dir + "/" + kShardDbDir)) {
    if (e.path().extension() == ".sst" && e.file_size() > *size) {
      sst = e.path().string();
      *size = e.file_size();
    }
  }
  return sst;
}

// Reads every ref alone: each is either its table bytes or DATA_LOSS naming
// the store's directory and the row. Returns how many were DATA_LOSS.
int ExpectIntactOrDataLoss(RowStore& store, const std::string& dir, std::span<const RowRef> refs,
                           const std::vector<uint8_t>& want, uint32_t rb) {
  int lost = 0;
  for (size_t i = 0; i < refs.size(); ++i) {
    const absl::Status s = store.ReadRows(refs.subspan(i, 1));
    if (s.ok()) {
      EXPECT_EQ(0, std::memcmp(refs[i].dst, want.data() + i * rb, rb)) << "wrong bytes, ref " << i;
      continue;
    }
    ++lost;
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_TRUE(absl::StrContains(
        s.message(), absl::StrCat("(", dir, "): layer ", refs[i].layer, " row ", refs[i].row, " ")))
        << s;
  }
  return lost;
}

TEST_F(RowStoreTest, CorruptSstByteIsDataLossNotWrongBytes) {
  const std::string dir = CopyShard(1);
  // The largest SST file; flip a byte a third of the way in (a data block:
  // the index and properties sit at the end).
  uint64_t size = 0;
  const std::string sst = LargestSst(dir, &size);
  ASSERT_FALSE(sst.empty());
  ASSERT_TRUE(testing::FlipByte(sst, size / 3).ok());
  // Block checksums are verified through mmap, pread and O_DIRECT alike.
  for (RowStoreOptions o : {RowStoreOptions{.mmap_reads = true, .reader_threads = 2},
                            RowStoreOptions{.mmap_reads = false, .reader_threads = 2},
                            RowStoreOptions{.direct_io = true, .reader_threads = 2}}) {
    SCOPED_TRACE(absl::StrCat("direct_io ", o.direct_io, " mmap ", o.mmap_reads));
    std::unique_ptr<RowStore> store = Open(dir, o);
    ASSERT_NE(store, nullptr);
    std::vector<uint8_t> got, want;
    std::vector<RowRef> refs = Refs(ShuffledRows(1, 3), &got, &want);
    absl::Status s = store->ReadRows(refs);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("shard 1 (", dir, "): layer "))) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "Corruption")) << s;
    EXPECT_GT(Stat(*store, "damaged_rows"), 0);
    // A scan over the damaged block fails the same way.
    std::vector<uint8_t> scanned, scanned_want;
    std::vector<RowRef> in_order =
        Refs(RowsInKeyOrder(table_->manifest(), 1), &scanned, &scanned_want);
    const absl::Status scan = store->ScanRows(in_order);
    EXPECT_EQ(scan.code(), absl::StatusCode::kDataLoss) << scan;
    EXPECT_TRUE(absl::StrContains(scan.message(), absl::StrCat("shard 1 (", dir, "): layer ")))
        << scan;
    // One by one: the rows of the damaged block are DATA_LOSS, every other
    // row reads its right bytes.
    const int lost = ExpectIntactOrDataLoss(*store, dir, refs, want, 66);
    EXPECT_GT(lost, 0);
    EXPECT_LT(lost, static_cast<int>(refs.size()) / 4);
  }
}

// A table file cut short while the store has it open. Mapped (a cuckoo
// tail, read from the server's own mapping or through RocksDB's), reading
// the lost pages raises SIGBUS, which the store's mapping guards turn into
// pages of zeros, which fail their row checksums; read with pread (a block
// tail), the read comes up short. Either way: DATA_LOSS for the rows lost,
// the right bytes for the others, and the process lives. (A block tail
// read through mmap is not tried: a page of zeros under its index block,
// which sits at the end of the file, trips RocksDB's assertions.)
TEST_F(RowStoreTest, FileTruncatedWhileOpenIsDataLossNotSigbus) {
  struct Case {
    TailFormat format;
    RowStoreOptions options;
  };
  for (const Case& c : {Case{TailFormat::kCuckoo, {.reader_threads = 2}},
                        Case{TailFormat::kBlock, {.mmap_reads = false, .reader_threads = 2}}}) {
    SCOPED_TRACE(absl::StrCat(TailFormatName(c.format), " mmap ", c.options.mmap_reads));
    const std::string dir = CopyShard(0, c.format);
    std::unique_ptr<RowStore> store = Open(dir, c.options);
    ASSERT_NE(store, nullptr);
    std::vector<uint8_t> got, want;
    std::vector<RowRef> refs = Refs(ShuffledRows(0, 5), &got, &want);
    ASSERT_TRUE(store->ReadRows(refs).ok());
    EXPECT_EQ(Stat(*store, "unreadable_pages"), 0);

    uint64_t size = 0;
    const std::string sst = LargestSst(dir, &size);
    ASSERT_FALSE(sst.empty());
    fs::resize_file(sst, size / 2);
    absl::Status s = store->ReadRows(refs);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    if (c.format == TailFormat::kCuckoo) {
      EXPECT_TRUE(absl::StrContains(s.message(), "could not be read (the file was truncated")) << s;
      EXPECT_GT(Stat(*store, "unreadable_pages"), 0);
    }
    const int lost = ExpectIntactOrDataLoss(*store, dir, refs, want, 66);
    EXPECT_GT(lost, 0);
    EXPECT_GT(Stat(*store, "damaged_rows"), 0);
    store.reset();
    // Opened again, the short file is refused up front.
    absl::StatusOr<std::unique_ptr<RowStore>> again = RowStore::Open(dir, c.options);
    EXPECT_EQ(again.status().code(), absl::StatusCode::kDataLoss) << again.status();
    EXPECT_TRUE(absl::StrContains(again.status().message(), "re-import")) << again.status();
    fs::remove_all(dir);
  }
}

TEST_F(RowStoreTest, RefusesMismatchedDirectories) {
  // shard.json of shard 2 next to shard 1's rocksdb/.
  std::string dir = CopyShard(1);
  fs::copy_file(ShardDir(2) + "/" + kShardInfoFile, dir + "/" + kShardInfoFile,
                fs::copy_options::overwrite_existing);
  absl::StatusOr<std::unique_ptr<RowStore>> s = RowStore::Open(dir, {});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_NE(s.status().message().find("rocksdb/ holds"), std::string::npos) << s.status();

  // A shard map that claims another shard count.
  dir = CopyShard(0);
  absl::StatusOr<ShardMap> map = ShardMap::Load(dir + "/" + kShardMapFile);
  ASSERT_TRUE(map.ok());
  map->n_shards = 4;
  ASSERT_TRUE(map->Save(dir + "/" + kShardMapFile).ok());
  s = RowStore::Open(dir, {});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();

  // No rocksdb/ at all.
  dir = CopyShard(2);
  ASSERT_TRUE(RemoveTree(dir + "/" + kShardDbDir).ok());
  s = RowStore::Open(dir, {});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_EQ(RowStore::Open(scratch_.Sub("nothing"), {}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(RowStoreTest, StatsReportIndexMemoryAndReads) {
  std::unique_ptr<RowStore> store = Open(ShardDir(0));
  ASSERT_NE(store, nullptr);
  std::vector<uint8_t> got, want;
  std::vector<RowRef> refs = Refs(ShuffledRows(0, 1), &got, &want);
  ASSERT_TRUE(store->ReadRows(refs).ok());
  std::map<std::string, double> stats;
  for (const auto& [k, v] : store->Stats()) stats[k] = v;
  EXPECT_GT(stats["rocksdb_index_memory_bytes"], 0);
  EXPECT_EQ(stats["rocksdb_multiget_keys"], static_cast<double>(refs.size()));
  EXPECT_GT(stats["rocksdb_file_reads"], 0);
  EXPECT_GT(stats["rocksdb_sst_bytes"], 0);
}

}  // namespace
}  // namespace engram
