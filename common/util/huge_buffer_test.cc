#include "common/util/huge_buffer.h"

#include <cstdint>
#include <cstring>
#include <utility>

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

}  // namespace
}  // namespace engram
