#include "shard/import/checkpoint_config.h"

#include <sys/wait.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/testing/child_process.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "shard/import/numpy_random.h"

namespace engram {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr const char kPython[] = "/usr/bin/python3";

bool IsPrime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d <= n / d; ++d) {
    if (n % d == 0) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------
// DeepSeek-V4.1

TEST(DeriveMultipliers, V41) {
  EXPECT_EQ(DeriveMultipliers(1, 99092, 4),
            (std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391}));
  EXPECT_EQ(DeriveMultipliers(14, 99092, 4),
            (std::vector<int64_t>{67716810739261, 51510806800915, 30921347202721, 82619226485591}));
}

TEST(DerivePrimes, V41IsFortyEightConsecutivePrimes) {
  const auto primes = DerivePrimes(2, 3, 8, 16000000);
  std::vector<int64_t> flat;
  std::vector<int64_t> layer_sums;
  ASSERT_EQ(primes.size(), 2u);
  for (const auto& layer : primes) {
    ASSERT_EQ(layer.size(), 3u);
    int64_t sum = 0;
    for (const auto& order : layer) {
      ASSERT_EQ(order.size(), 8u);
      for (int64_t p : order) {
        flat.push_back(p);
        sum += p;
      }
    }
    layer_sums.push_back(sum);
  }
  std::vector<int64_t> want;
  for (int64_t n = 16000000; want.size() < 48; ++n) {
    if (IsPrime(n)) want.push_back(n);
  }
  EXPECT_EQ(want.front(), 16000057);
  EXPECT_EQ(want.back(), 16000889);
  EXPECT_EQ(flat, want);
  EXPECT_EQ(layer_sums, (std::vector<int64_t>{384006168, 384016682}));
}

EngramConfig V41Config() {
  EngramConfig c;
  c.layer_ids = {1, 14};
  c.num_embeddings = {384006168, 384016682};
  c.max_ngram_size = 4;
  c.n_heads = 8;
  c.head_dim = 256;
  c.vocab_size = 16000000;
  c.compressed_vocab_size = 99092;
  c.pad_token_id = 2;
  return c;
}

TEST(DeriveHashLayout, V41) {
  std::vector<int64_t> token_map(1000);
  std::iota(token_map.begin(), token_map.end(), 0);
  absl::StatusOr<HashLayout> l = DeriveHashLayout(V41Config(), token_map, 2);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->vocab_size, 1000);
  EXPECT_EQ(l->engram_layer_ids, (std::vector<int64_t>{1, 14}));
  EXPECT_EQ(l->pad_id, 2);
  EXPECT_EQ(l->dead_id, -1);
  EXPECT_EQ(l->table_rows, (std::vector<int64_t>{384006168, 384016682}));
  EXPECT_EQ(l->multipliers[1], DeriveMultipliers(14, 99092, 4));
  EXPECT_EQ(l->primes, DerivePrimes(2, 3, 8, 16000000));
  EXPECT_EQ(l->offsets[0][0], 0);
  EXPECT_EQ(l->offsets[0][1], 16000057);
  EXPECT_EQ(l->offsets[1][23] + l->primes[1][2][7], 384016682);
}

// ---------------------------------------------------------------------------
// Against numpy itself

// Runs `script` with /usr/bin/python3 and `args`; its stdout lines, or an
// error when it cannot be started or fails.
absl::StatusOr<std::vector<std::string>> RunPython(const std::string& script,
                                                   const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kPython, "-c", script};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<std::unique_ptr<testing::ChildProcess>> child = testing::ChildProcess::Spawn(argv);
  if (!child.ok()) return child.status();
  std::vector<std::string> lines;
  absl::StatusOr<std::string> line;
  while ((line = (*child)->ReadLine(absl::Seconds(120))).ok()) lines.push_back(*std::move(line));
  if (!absl::IsOutOfRange(line.status())) {  // not the end of its output: hung
    (*child)->Stop(absl::Seconds(1));
    return line.status();
  }
  const int status = (*child)->Wait();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(kPython, " failed: wait status ", status));
  }
  return lines;
}

// Skips the test, saying why, unless /usr/bin/python3 imports numpy (Debian's
// python3-numpy, scripts/setup.sh).
#define SKIP_WITHOUT_NUMPY()                                                        \
  do {                                                                              \
    absl::StatusOr<std::vector<std::string>> v = RunPython("import numpy", {});     \
    if (!v.ok()) GTEST_SKIP() << kPython << " cannot import numpy: " << v.status(); \
  } while (0)

std::vector<int64_t> ParseInts(const std::string& line) {
  std::vector<int64_t> out;
  for (absl::string_view s : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    out.push_back(std::stoll(std::string(s)));
  }
  return out;
}

TEST(DeriveMultipliers, MatchesNumpy) {
  SKIP_WITHOUT_NUMPY();
  constexpr int kN = 5;  // odd: the 32-bit path leaves half a draw unused
  const std::vector<int64_t> layers = {0, 1, 2, 14, 27, 61, 1000, 429496, 922337203685477};
  const std::vector<int64_t> vocabs = {
      1,  // bound 2^62 - 1: the 64-bit path
      7,
      99092,             // V4.1
      1073741823,        // bound 2^32 + 4: the 64-bit path at its edge
      1073741824,        // bound 2^32 - 1: the 32-bit path at its edge
      2147483647,        // bound 2^31 + 1: the 32-bit path, half the draws rejected
      3000000000,        // bound ~1.5e9: the 32-bit path
      int64_t{1} << 40,  // bound 2^22 - 1: the 32-bit path
      int64_t{1} << 61,  // bound 1: no draws
      kInt64Max / 2,     // bound 1, the largest vocab allowed
  };
  std::vector<std::string> args = {absl::StrCat(kN)};
  for (int64_t layer : layers) {
    for (int64_t vocab : vocabs) args.push_back(absl::StrCat(layer, ":", vocab));
  }
  const std::string script = R"(
import sys
import numpy as np
n = int(sys.argv[1])
for case in sys.argv[2:]:
    layer, vocab = (int(x) for x in case.split(':'))
    bound = (np.iinfo(np.int64).max // vocab) // 2
    m = np.random.default_rng(10007 * layer).integers(0, bound, size=n, dtype=np.int64) * 2 + 1
    print(' '.join(str(int(x)) for x in m))
)";
  absl::StatusOr<std::vector<std::string>> lines = RunPython(script, args);
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), args.size() - 1);
  size_t i = 0;
  for (int64_t layer : layers) {
    for (int64_t vocab : vocabs) {
      EXPECT_EQ(DeriveMultipliers(layer, vocab, kN), ParseInts((*lines)[i]))
          << "layer " << layer << ", compressed vocab " << vocab;
      ++i;
    }
  }
}

TEST(NumpyIntegers, MatchesNumpy) {
  SKIP_WITHOUT_NUMPY();
  constexpr int kN = 9;
  const std::vector<uint64_t> seeds = {0, 1, 12345, (uint64_t{1} << 40) + 3,
                                       std::numeric_limits<uint64_t>::max()};
  const std::vector<int64_t> highs = {
      1,
      2,
      3,
      (int64_t{1} << 31) + 1,
      (int64_t{1} << 32) - 1,
      int64_t{1} << 32,  // rng 0xFFFFFFFF: plain 32-bit draws
      (int64_t{1} << 32) + 1,
      3689348814741910324,  // ~2^64 / 5: a fifth of the 64-bit draws rejected
      kInt64Max,
  };
  std::vector<std::string> args = {absl::StrCat(kN)};
  for (uint64_t seed : seeds) {
    for (int64_t high : highs) args.push_back(absl::StrCat(seed, ":", high));
  }
  const std::string script = R"(
import sys
import numpy as np
n = int(sys.argv[1])
for case in sys.argv[2:]:
    seed, high = (int(x) for x in case.split(':'))
    v = np.random.default_rng(seed).integers(0, high, size=n, dtype=np.int64)
    print(' '.join(str(int(x)) for x in v))
)";
  absl::StatusOr<std::vector<std::string>> lines = RunPython(script, args);
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), args.size() - 1);
  size_t i = 0;
  for (uint64_t seed : seeds) {
    for (int64_t high : highs) {
      EXPECT_EQ(NumpyIntegers(seed, high, kN), ParseInts((*lines)[i]))
          << "seed " << seed << ", high " << high;
      ++i;
    }
  }
}

// ---------------------------------------------------------------------------
// ParseEngramConfig

constexpr const char* kKeys[] = {"engram_layer_ids",
                                 "engram_num_embeddings",
                                 "engram_max_ngram_size",
                                 "engram_n_heads",
                                 "engram_head_dim",
                                 "engram_vocab_size",
                                 "engram_compressed_vocab_size",
                                 "engram_pad_token_id"};

nlohmann::json V41Keys() {
  return {{"engram_layer_ids", {1, 14}},
          {"engram_num_embeddings", {384006168, 384016682}},
          {"engram_max_ngram_size", 4},
          {"engram_n_heads", 8},
          {"engram_head_dim", 256},
          {"engram_vocab_size", 16000000},
          {"engram_compressed_vocab_size", 99092},
          {"engram_pad_token_id", 2},
          {"hidden_size", 4096}};
}

// A V4.1-shaped config.json: the Engram keys inside text_config.
nlohmann::json V41Json() {
  return {{"architectures", {"DeepseekV41ForCausalLM"}},
          {"model_type", "deepseek_v41"},
          {"torch_dtype", "bfloat16"},
          {"text_config", V41Keys()}};
}

void ExpectV41(const EngramConfig& c) {
  EXPECT_EQ(c.layer_ids, (std::vector<int64_t>{1, 14}));
  EXPECT_EQ(c.num_embeddings, (std::vector<uint64_t>{384006168, 384016682}));
  EXPECT_EQ(c.max_ngram_size, 4);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.vocab_size, 16000000);
  EXPECT_EQ(c.compressed_vocab_size, 99092);
  EXPECT_EQ(c.pad_token_id, 2);
}

TEST(ParseEngramConfig, V41TextConfig) {
  absl::StatusOr<EngramConfig> c = ParseEngramConfig(V41Json().dump(2), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectV41(*c);
}

TEST(ParseEngramConfig, TopLevelKeys) {
  nlohmann::json j = V41Keys();
  j["model_type"] = "deepseek_v41";
  absl::StatusOr<EngramConfig> c = ParseEngramConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectV41(*c);
  j["text_config"] = nullptr;  // a null text_config is no text_config
  c = ParseEngramConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectV41(*c);
}

// The error for V41Json() with text_config[key] replaced by `value`
// (removed when value is discarded); expects a one-line InvalidArgument
// naming the file and the key.
std::string ErrorWith(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = V41Json();
  if (value.is_discarded()) {
    j["text_config"].erase(key);
  } else {
    j["text_config"][key] = value;
  }
  absl::StatusOr<EngramConfig> c = ParseEngramConfig(j.dump(), "/ckpt/config.json");
  if (c.ok()) {
    ADD_FAILURE() << key << " = " << value.dump() << " was accepted";
    return "";
  }
  const std::string msg(c.status().message());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << msg;
  EXPECT_TRUE(absl::StartsWith(msg, "/ckpt/config.json: ")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "text_config." + key))
      << msg << " (for " << value.dump() << ")";
  EXPECT_FALSE(absl::StrContains(msg, "\n")) << msg;
  return msg;
}

TEST(ParseEngramConfig, MissingKey) {
  for (const char* key : kKeys) {
    const std::string msg = ErrorWith(key, nlohmann::json(nlohmann::json::value_t::discarded));
    EXPECT_TRUE(absl::StrContains(msg, "missing")) << msg;
  }
}

TEST(ParseEngramConfig, WrongType) {
  for (const char* key : kKeys) {
    ErrorWith(key, "4");
    ErrorWith(key, 4.0);
    ErrorWith(key, true);
    ErrorWith(key, nlohmann::json::object());
  }
  // Scalars where arrays belong and the other way round.
  ErrorWith("engram_layer_ids", 1);
  ErrorWith("engram_num_embeddings", 384006168);
  ErrorWith("engram_n_heads", {8});
  ErrorWith("engram_layer_ids", {1, "14"});
  ErrorWith("engram_num_embeddings", {384006168, 3.5});
}

TEST(ParseEngramConfig, BadValue) {
  const uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
  ErrorWith("engram_layer_ids", nlohmann::json::array());
  ErrorWith("engram_layer_ids", {1, -14});
  EXPECT_TRUE(absl::StrContains(ErrorWith("engram_layer_ids", {14, 14}), "twice"));
  ErrorWith("engram_layer_ids", {1, kU64Max});
  ErrorWith("engram_num_embeddings", {384006168});
  ErrorWith("engram_num_embeddings", {384006168, 384016682, 5});
  ErrorWith("engram_num_embeddings", {0, 384016682});
  ErrorWith("engram_num_embeddings", {384006168, -1});
  ErrorWith("engram_num_embeddings", {384006168, (uint64_t{1} << 48) + 1});
  ErrorWith("engram_max_ngram_size", 1);
  ErrorWith("engram_max_ngram_size", 65);
  ErrorWith("engram_max_ngram_size", (int64_t{1} << 32) + 4);  // would narrow to 4
  ErrorWith("engram_n_heads", 0);
  ErrorWith("engram_n_heads", 4097);
  ErrorWith("engram_head_dim", 0);
  ErrorWith("engram_head_dim", -256);
  ErrorWith("engram_head_dim", int64_t{1} << 31);
  ErrorWith("engram_vocab_size", 0);
  ErrorWith("engram_vocab_size", kU64Max);
  ErrorWith("engram_compressed_vocab_size", 0);
  ErrorWith("engram_compressed_vocab_size", kInt64Max / 2 + 1);  // numpy: low >= high
  ErrorWith("engram_pad_token_id", -1);

  // The edges themselves are fine.
  nlohmann::json j = V41Json();
  j["text_config"]["engram_max_ngram_size"] = 64;
  j["text_config"]["engram_n_heads"] = 4096;
  j["text_config"]["engram_compressed_vocab_size"] = kInt64Max / 2;
  j["text_config"]["engram_num_embeddings"] = {1, uint64_t{1} << 48};
  j["text_config"]["engram_pad_token_id"] = 0;
  EXPECT_TRUE(ParseEngramConfig(j.dump(), "config.json").ok());
}

TEST(ParseEngramConfig, NotAConfig) {
  for (const char* text : {"", "{", "[1, 2]", "42", R"({"text_config": 3})"}) {
    absl::StatusOr<EngramConfig> c = ParseEngramConfig(text, "/ckpt/config.json");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(c.status().message(), "/ckpt/config.json: ")) << c.status();
  }
}

// ---------------------------------------------------------------------------
// DeriveHashLayout

// Layers [1, 3], orders 2..3, 2 heads, vocab 100: the walk takes
// 101 103 | 107 109 for layer 1 (sum 420) and 113 127 | 131 137 for layer 3
// (sum 508).
EngramConfig SmallConfig() {
  EngramConfig c;
  c.layer_ids = {1, 3};
  c.num_embeddings = {420, 508};
  c.max_ngram_size = 3;
  c.n_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 100;
  c.compressed_vocab_size = 40;
  c.pad_token_id = 0;
  return c;
}

std::vector<int64_t> SmallTokenMap() {
  std::vector<int64_t> map(60);
  for (size_t i = 0; i < map.size(); ++i) map[i] = static_cast<int64_t>(i % 40);
  return map;
}

TEST(DeriveHashLayout, Small) {
  absl::StatusOr<HashLayout> l = DeriveHashLayout(SmallConfig(), SmallTokenMap(), 0);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(l->Validate().ok());
  EXPECT_EQ(l->vocab_size, 60);
  EXPECT_EQ(l->token_map, SmallTokenMap());
  EXPECT_EQ(l->engram_layer_ids, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(l->max_ngram_size, 3);
  EXPECT_EQ(l->n_heads, 2);
  EXPECT_EQ(l->pad_id, 0);
  EXPECT_EQ(l->dead_id, -1);
  EXPECT_EQ(l->primes, (std::vector<std::vector<std::vector<int64_t>>>{{{101, 103}, {107, 109}},
                                                                       {{113, 127}, {131, 137}}}));
  EXPECT_EQ(l->offsets,
            (std::vector<std::vector<int64_t>>{{0, 101, 204, 311}, {0, 113, 240, 371}}));
  EXPECT_EQ(l->table_rows, (std::vector<int64_t>{420, 508}));
  EXPECT_EQ(l->multipliers, (std::vector<std::vector<int64_t>>{DeriveMultipliers(1, 40, 3),
                                                               DeriveMultipliers(3, 40, 3)}));
  for (const auto& layer : l->multipliers) {
    for (int64_t m : layer) EXPECT_EQ(m % 2, 1);
  }
  // The layout survives its own JSON round trip.
  absl::StatusOr<HashLayout> again = HashLayout::FromJson(l->ToJson());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->ToJson(), l->ToJson());
}

TEST(DeriveHashLayout, RefusesWrongNumEmbeddings) {
  EngramConfig c = SmallConfig();
  c.num_embeddings = {420, 509};
  absl::StatusOr<HashLayout> l = DeriveHashLayout(c, SmallTokenMap(), 0);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(l.status().message(),
            "layer 3: the derived primes sum to 508 but engram_num_embeddings says 509");

  // A table too small for even the vocabulary is refused before the walk.
  c.num_embeddings = {420, 399};
  l = DeriveHashLayout(c, SmallTokenMap(), 0);
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(absl::StartsWith(l.status().message(), "layer 3: ")) << l.status();
  EXPECT_TRUE(absl::StrContains(l.status().message(), "engram_num_embeddings 399")) << l.status();
}

TEST(DeriveHashLayout, RefusesBadConfigOrLayout) {
  EngramConfig c = SmallConfig();
  c.num_embeddings = {420};
  EXPECT_TRUE(absl::StrContains(DeriveHashLayout(c, SmallTokenMap(), 0).status().message(),
                                "engram_num_embeddings"));
  c = SmallConfig();
  c.layer_ids = {3, 3};
  EXPECT_TRUE(absl::StrContains(DeriveHashLayout(c, SmallTokenMap(), 0).status().message(),
                                "engram_layer_ids"));
  c = SmallConfig();
  c.compressed_vocab_size = 0;
  EXPECT_TRUE(absl::StrContains(DeriveHashLayout(c, SmallTokenMap(), 0).status().message(),
                                "engram_compressed_vocab_size"));
  // HashLayout::Validate has the last word: an empty token map, a negative
  // pad id.
  EXPECT_FALSE(DeriveHashLayout(SmallConfig(), {}, 0).ok());
  EXPECT_FALSE(DeriveHashLayout(SmallConfig(), SmallTokenMap(), -1).ok());
}

}  // namespace
}  // namespace engram
