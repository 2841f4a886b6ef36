#include "shard/mapping_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "common/testing/test_files.h"
#include "gtest/gtest.h"

namespace engram {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kPages = 4;

// A file of kPages pages of 'x', mapped read-only.
class MappingGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.Sub("file.bin");
    const int fd = open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    const std::string bytes(kPages * kPage, 'x');
    ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    base_ = static_cast<const volatile char*>(
        mmap(nullptr, kPages * kPage, PROT_READ, MAP_SHARED, fd, 0));
    close(fd);
    ASSERT_NE(base_, MAP_FAILED);
  }
  void TearDown() override { munmap(const_cast<char*>(base_), kPages * kPage); }

  testing::TempDir dir_;
  std::string path_;
  const volatile char* base_ = nullptr;
};

TEST_F(MappingGuardTest, PagesCutFromAGuardedFileReadAsZeros) {
  absl::StatusOr<std::unique_ptr<MappingGuard>> guard =
      MappingGuard::Register(const_cast<char*>(base_), kPages * kPage, path_);
  ASSERT_TRUE(guard.ok()) << guard.status();
  EXPECT_EQ((*guard)->Describe(), "");
  std::filesystem::resize_file(path_, kPage);
  EXPECT_EQ(base_[10], 'x');           // still in the file
  EXPECT_EQ(base_[2 * kPage + 5], 0);  // cut: zeros, not SIGBUS
  EXPECT_EQ(base_[2 * kPage + 6], 0);  // the same page, no second fault
  EXPECT_EQ(base_[3 * kPage], 0);
  EXPECT_EQ((*guard)->zeroed_pages(), 2u);
  const std::string d = (*guard)->Describe();
  EXPECT_TRUE(absl::StrContains(d, "2 pages of " + path_ + " from byte 8192 on could not be read"))
      << d;
}

TEST_F(MappingGuardTest, FaultOutsideEveryGuardedRangeStillKills) {
  // A guard elsewhere installs the handler; this mapping has none.
  absl::StatusOr<std::unique_ptr<MappingGuard>> other =
      MappingGuard::Register(reinterpret_cast<const void*>(0x1000), kPage, "elsewhere");
  ASSERT_TRUE(other.ok());
  EXPECT_EXIT(
      {
        std::filesystem::resize_file(path_, kPage);
        (void)base_[2 * kPage];
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

TEST_F(MappingGuardTest, FileMappingsInListsTheMappingsOfADirectory) {
  bool found = false;
  for (const FileMapping& m : FileMappingsIn(dir_.path())) {
    if (m.path == std::filesystem::canonical(path_).string()) {
      found = true;
      EXPECT_EQ(m.start, reinterpret_cast<uintptr_t>(base_));
      EXPECT_EQ(m.end - m.start, kPages * kPage);
      EXPECT_EQ(m.offset, 0u);
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace engram
