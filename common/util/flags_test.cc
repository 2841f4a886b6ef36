// ParseByteSize: the byte sizes the binaries' flags take.
#include <cstdint>

#include "common/util/flags.h"
#include "gtest/gtest.h"

namespace engram {
namespace {

TEST(ParseByteSize, SuffixesAndErrors) {
  EXPECT_EQ(*ParseByteSize("0"), 0u);
  EXPECT_EQ(*ParseByteSize("1048576"), 1048576u);
  EXPECT_EQ(*ParseByteSize("512K"), 512u << 10);
  EXPECT_EQ(*ParseByteSize("512M"), 512u << 20);
  EXPECT_EQ(*ParseByteSize("2G"), uint64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("2gib"), uint64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("3GB"), uint64_t{3} << 30);
  EXPECT_EQ(*ParseByteSize("1T"), uint64_t{1} << 40);
  for (const char* bad : {"", "G", "-1", "+5", "1.5G", "12Q", "99999999999T", "1 G"}) {
    EXPECT_EQ(ParseByteSize(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace engram
