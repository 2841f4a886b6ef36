#include "shard/uring_file_system.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/test_files.h"
#include "gtest/gtest.h"

namespace engram {
namespace {

constexpr size_t kPage = 4096;

// A file of `pages` pages and `tail` bytes more; byte i is (i * 7 + i / 4096) & 255.
std::string WriteFile(const std::string& path, size_t pages, size_t tail) {
  std::string bytes(pages * kPage + tail, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 7 + i / kPage) & 255);
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};

// A file of `pages` pages and `tail` bytes in a directory of its own,
// opened through a fresh UringFileSystem.
struct OpenedFile {
  testing::TempDir dir;
  std::string bytes;
  std::shared_ptr<rocksdb::FileSystem> fs = NewUringFileSystem(rocksdb::FileSystem::Default());
  std::unique_ptr<rocksdb::FSRandomAccessFile> file;

  OpenedFile(size_t pages, size_t tail, bool direct) {
    const std::string path = dir.Sub("file");
    bytes = WriteFile(path, pages, tail);
    rocksdb::FileOptions fo;
    fo.use_direct_reads = direct;
    EXPECT_TRUE(fs->NewRandomAccessFile(path, fo, &file, nullptr).ok());
  }
};

class UringFileSystemTest : public ::testing::TestWithParam<bool> {};

// MultiRead of many requests, one running past the end of the file and one
// wholly past it, reads what the base file system reads, through rings
// where the process may make them, with O_DIRECT and without.
TEST_P(UringFileSystemTest, MultiReadReadsWhatTheBaseReads) {
  OpenedFile f(40, 100, GetParam());
  ASSERT_NE(f.file, nullptr);
  const std::string& bytes = f.bytes;

  // Pages 3, 17, 0, 39, 8..9 (two pages), 40 (100 bytes, then the end),
  // 45 (past the end).
  const std::vector<std::pair<size_t, size_t>> at = {{3, 1}, {17, 1}, {0, 1}, {39, 1},
                                                     {8, 2}, {40, 1}, {45, 1}};
  std::unique_ptr<char, AlignedFree> buf(
      static_cast<char*>(std::aligned_alloc(kPage, at.size() * 2 * kPage)));
  std::vector<rocksdb::FSReadRequest> reqs(at.size());
  for (size_t i = 0; i < at.size(); ++i) {
    reqs[i].offset = at[i].first * kPage;
    reqs[i].len = at[i].second * kPage;
    reqs[i].scratch = buf.get() + i * 2 * kPage;
  }
  ASSERT_TRUE(f.file->MultiRead(reqs.data(), reqs.size(), rocksdb::IOOptions(), nullptr).ok());
  for (size_t i = 0; i < at.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("request ", i));
    ASSERT_TRUE(reqs[i].status.ok()) << reqs[i].status.ToString();
    const size_t from = std::min(bytes.size(), reqs[i].offset);
    const size_t want = std::min(reqs[i].len, bytes.size() - from);
    ASSERT_EQ(reqs[i].result.size(), want);
    EXPECT_EQ(std::memcmp(reqs[i].result.data(), bytes.data() + from, want), 0);
  }
  const UringReadCounts counts = UringCounts(*f.fs);
  if (UringAvailable()) {
    EXPECT_EQ(counts.reads, at.size());
    EXPECT_EQ(counts.calls, 1u);
  } else {
    EXPECT_EQ(counts.reads, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(DirectAndBuffered, UringFileSystemTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Direct" : "Buffered";
                         });

// A request the kernel refuses (O_DIRECT at an unaligned offset: EINVAL)
// is that request's error; the others are read.
TEST(UringFileSystem, ARefusedReadIsThatRequestsError) {
  if (!UringAvailable()) GTEST_SKIP() << "no io_uring in this process";
  OpenedFile f(8, 0, /*direct=*/true);
  ASSERT_NE(f.file, nullptr);
  const std::string& bytes = f.bytes;
  std::unique_ptr<char, AlignedFree> buf(static_cast<char*>(std::aligned_alloc(kPage, 2 * kPage)));
  std::vector<rocksdb::FSReadRequest> reqs(2);
  reqs[0].offset = 2 * kPage;
  reqs[0].len = kPage;
  reqs[0].scratch = buf.get();
  reqs[1].offset = 3 * kPage + 1;
  reqs[1].len = kPage;
  reqs[1].scratch = buf.get() + kPage;
  f.file->MultiRead(reqs.data(), reqs.size(), rocksdb::IOOptions(), nullptr);
  ASSERT_TRUE(reqs[0].status.ok()) << reqs[0].status.ToString();
  EXPECT_EQ(std::memcmp(reqs[0].result.data(), bytes.data() + 2 * kPage, kPage), 0);
  EXPECT_FALSE(reqs[1].status.ok());
}

}  // namespace
}  // namespace engram
