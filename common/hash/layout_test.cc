// Malformed hash layouts, as JSON text and as structs: each gets the status
// its case names (docs/reliability.md, "Malformed input").
#include "common/hash/layout.h"

#include <cstdint>
#include <functional>
#include <string>

#include "absl/strings/str_replace.h"
#include "common/hash/engram_hash.h"
#include "common/testing/test_files.h"
#include "gtest/gtest.h"

namespace engram {
namespace {

// 4 tokens, one Engram layer, orders 2..3, 2 heads, primes 2, 3, 5, 7.
HashLayout Tiny() { return testing::TinyHashLayout(); }

void ExpectInvalid(const absl::Status& s, const std::string& what, const std::string& message) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
  EXPECT_NE(s.message().find(message), std::string::npos) << what << ": " << s;
}

TEST(LayoutMalformed, JsonCases) {
  ASSERT_TRUE(Tiny().Validate().ok());
  const std::string tiny = Tiny().ToJson();
  // Replaces `from` in the tiny layout's JSON with `to`.
  auto edit = [&](const std::string& from, const std::string& to) {
    EXPECT_NE(tiny.find(from), std::string::npos) << from;
    return absl::StrReplaceAll(tiny, {{from, to}});
  };
  const struct {
    const char* what;
    std::string json;
    const char* message;
  } cases[] = {
      {"not JSON", "{\"vocab_size\": ", "hash layout: not valid JSON"},
      {"nested 100,000 deep", std::string(100000, '[') + std::string(100000, ']'),
       "JSON nested deeper than 64 levels"},
      {"an array", "[1]", "layout must be a JSON object"},
      {"vocab_size a string", edit("\"vocab_size\":4", "\"vocab_size\":\"4\""),
       "member \"vocab_size\" must be an integer"},
      {"max_ngram_size 65", edit("\"max_ngram_size\":3", "\"max_ngram_size\":65"),
       "max_ngram_size must be in 2..64"},
      {"n_heads 0", edit("\"n_heads\":2", "\"n_heads\":0"), "n_heads must be in 1..4096"},
      {"token_map shorter than vocab_size", edit("\"token_map\":[0,1,2,3]", "\"token_map\":[0,1]"),
       "token_map has 2 entries, vocab_size is 4"},
      {"token_map value equal to dead_id",
       edit("\"token_map\":[0,1,2,3]", "\"token_map\":[0,-1,2,3]"),
       "token_map[1] = -1 is negative or equals dead_id"},
      {"primes not integers", edit("[[2,3],[5,7]]", "[[2,3],[5,7.5]]"),
       "primes[0][1] must hold integers only"},
      {"prime 0", edit("[[2,3],[5,7]]", "[[2,0],[5,7]]"), "primes[0][0][1] must be >= 1"},
      {"offset past the table", edit("\"table_rows\":[17]", "\"table_rows\":[16]"),
       "at offset 10 with prime 7 falls outside the layer's 16 rows"},
      // off + p in the message was a signed overflow.
      {"offset and prime both INT64_MAX",
       edit("\"offsets\":[[0,2,5,10]]", "\"offsets\":[[0,2,5,9223372036854775807]]"),
       "at offset 9223372036854775807 with prime 7"},
      {"missing table_rows", edit(",\"table_rows\":[17]", ""), "missing member \"table_rows\""},
  };
  for (const auto& c : cases) {
    ExpectInvalid(HashLayout::FromJson(c.json).status(), c.what, c.message);
  }
}

TEST(LayoutMalformed, StructCasesTheHasherWouldTripOn) {
  // The hasher keeps an n-gram's look-back in a 64-entry stack array; a
  // layout built in code with a larger max_ngram_size passed Validate.
  HashLayout l = Tiny();
  l.max_ngram_size = 65;
  l.multipliers[0].resize(65, 1);
  l.primes[0].resize(64, {2, 3});
  l.offsets[0].resize(128, 0);
  ExpectInvalid(l.Validate(), "max_ngram_size 65", "max_ngram_size must be in 2..64");
  EXPECT_FALSE(NgramHasher::Create(l).ok());

  l = Tiny();
  l.n_heads = 1 << 30;  // n_cols() would overflow an int
  ExpectInvalid(l.Validate(), "n_heads 2^30", "n_heads must be in 1..4096");
}

}  // namespace
}  // namespace engram
