// ShardServerOptions and the byte sizes its flags take: checked without a
// server.
#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "service/shard_server.h"

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

TEST(ShardServerOptions, ValidateNamesTheBadField) {
  ShardServerOptions options;
  options.listen = "127.0.0.1:0";
  EXPECT_NE(options.Validate().message().find("db_dir"), std::string::npos);
  options.db_dir = "/x";
  EXPECT_TRUE(options.Validate().ok());
  options.threads = 0;
  EXPECT_NE(options.Validate().message().find("threads"), std::string::npos);
  options.threads = 4;
  options.max_rows_per_request = 0;
  EXPECT_NE(options.Validate().message().find("max rows"), std::string::npos);
  options.max_rows_per_request = 10;
  options.listen = "nocolon";
  EXPECT_NE(options.Validate().message().find("nocolon"), std::string::npos);
}

}  // namespace
}  // namespace engram
