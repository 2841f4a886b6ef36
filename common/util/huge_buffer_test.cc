#include "common/util/huge_buffer.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace engram {
namespace {

TEST(HugePageBuffer, IsZeroedWritableAndAligned) {
  const size_t bytes = (size_t{5} << 20) + 123;  // not a whole number of pages
  absl::StatusOr<HugePageBuffer> b = HugePageBuffer::Allocate(bytes);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_NE(b->data(), nullptr);
  EXPECT_EQ(b->size(), bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % (size_t{2} << 20), 0u);
  for (size_t i = 0; i < bytes; i += 4093) ASSERT_EQ(b->data()[i], 0) << i;
  EXPECT_EQ(b->data()[bytes - 1], 0);
  std::memset(b->data(), 0x5a, bytes);
  EXPECT_EQ(b->data()[bytes - 1], 0x5a);
}

TEST(HugePageBuffer, MovesOwnership) {
  absl::StatusOr<HugePageBuffer> b = HugePageBuffer::Allocate(4096);
  ASSERT_TRUE(b.ok());
  b->data()[7] = 9;
  HugePageBuffer moved = *std::move(b);
  EXPECT_EQ(moved.data()[7], 9);
  HugePageBuffer other;
  other = std::move(moved);
  EXPECT_EQ(moved.data(), nullptr);
  EXPECT_EQ(other.data()[7], 9);
  EXPECT_EQ(other.size(), 4096u);
}

TEST(HugePageBuffer, EmptyAndImpossibleSizes) {
  absl::StatusOr<HugePageBuffer> empty = HugePageBuffer::Allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->data(), nullptr);
  absl::StatusOr<HugePageBuffer> huge = HugePageBuffer::Allocate(size_t{1} << 62);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
}

// Resident bytes of this process (/proc/self/statm).
uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// What was consumed leaves the process's resident set; what was not is
// untouched, and the block is still freed as usual.
TEST(ReleaseConsumedPages, ReturnsTheConsumedPagesOnly) {
  const size_t n = size_t{8} << 20;  // 64 MiB of keys
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = i * 3 + 1;
  const uint64_t before = ResidentBytes();
  ReleaseConsumedPages(keys.data(), n * sizeof(uint64_t), n / 2 * sizeof(uint64_t));
  const uint64_t after = ResidentBytes();
  ASSERT_LT(after, before);
  EXPECT_GE(before - after, uint64_t{30} << 20);  // about 32 MiB released
  for (size_t i = n / 2; i < n; ++i) ASSERT_EQ(keys[i], i * 3 + 1) << i;
  EXPECT_EQ(keys[0], 1u);  // the first page stays
  // Nothing happens for a consumed prefix inside the first page, or for
  // a block of one page.
  ReleaseConsumedPages(keys.data(), n * sizeof(uint64_t), 16);
  EXPECT_EQ(keys[1], 4u);
  uint64_t small[4] = {5, 6, 7, 8};
  ReleaseConsumedPages(small, sizeof(small), sizeof(small));
  EXPECT_EQ(small[3], 8u);
}

}  // namespace
}  // namespace engram
