// ParseJson's nesting bound: exact for valid JSON, blind to brackets
// inside strings.
#include "common/util/json_parse.h"

#include <string>

#include "gtest/gtest.h"

namespace engram {
namespace {

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(ParseJson, NestingBound) {
  EXPECT_TRUE(ParseJson(Nested(kMaxJsonDepth)).ok());
  const absl::Status s = ParseJson(Nested(kMaxJsonDepth + 1)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "JSON nested deeper than 64 levels");
  // Objects count as arrays do.
  std::string objects;
  for (int i = 0; i < kMaxJsonDepth; ++i) objects += "{\"a\":";
  EXPECT_FALSE(ParseJson(objects + "[1]" + std::string(kMaxJsonDepth, '}')).ok());
  EXPECT_TRUE(ParseJson(objects + "1" + std::string(kMaxJsonDepth, '}')).ok());
}

TEST(ParseJson, BracketsInStringsDoNotCount) {
  const std::string text = "[\"" + std::string(100, '[') + "\\\"" + std::string(100, '{') + "\"]";
  const absl::StatusOr<nlohmann::json> j = ParseJson(text);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)[0].get<std::string>().size(), 201u);
}

TEST(ParseJson, InvalidJson) {
  for (const char* text : {"", "{", "[1,]", "{\"a\" 1}", "nul"}) {
    const absl::Status s = ParseJson(text).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(s.message(), "not valid JSON") << text;
  }
}

}  // namespace
}  // namespace engram
