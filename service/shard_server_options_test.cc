// ShardServerOptions: checked without a server.
#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "service/shard_server.h"

namespace engram {
namespace {

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
  options.later_read_depth = 0;
  EXPECT_NE(options.Validate().message().find("later read depth = 0"), std::string::npos);
  options.later_read_depth = 4;
  options.listen = "nocolon";
  EXPECT_NE(options.Validate().message().find("nocolon"), std::string::npos);
}

}  // namespace
}  // namespace engram
