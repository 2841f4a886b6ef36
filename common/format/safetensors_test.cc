// Malformed safetensors headers: each gets the status its case names (the
// table of docs/reliability.md, "Malformed input", lists them).
#include "common/format/safetensors.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace engram {
namespace {

// The 8-byte length (default: the JSON's) followed by the JSON.
std::string File(const std::string& json, uint64_t declared_len = 0) {
  std::string out(8, '\0');
  uint64_t n = declared_len ? declared_len : json.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xFF);
  return out + json;
}

std::string Tensor(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"t":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets +
         "}}";
}

struct Case {
  const char* what;
  std::string file;
  uint64_t extra_bytes;  // of data after the header
  absl::StatusCode code;
  const char* message;
};

TEST(SafetensorsMalformed, EveryCaseGetsItsStatus) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const Case cases[] = {
      {"file shorter than the length word", "abcd", 0, absl::StatusCode::kDataLoss,
       "too short for a safetensors file"},
      {"header length over 100 MB", File("{}", (100ull << 20) + 1), 1ull << 30,
       absl::StatusCode::kInvalidArgument, "exceeds the 100 MB limit"},
      {"header length larger than the file", File("{}", 1000), 0, absl::StatusCode::kDataLoss,
       "runs past the end of the file"},
      {"header not JSON", File("{not json"), 0, absl::StatusCode::kInvalidArgument,
       "safetensors header is not JSON: not valid JSON"},
      {"header a JSON array", File("[1,2]"), 0, absl::StatusCode::kInvalidArgument,
       "is not a JSON object"},
      // nlohmann parses it, but dump() of the value recursed 100,000 deep
      // and overflowed the stack.
      {"metadata value nested 100,000 deep", File(R"({"__metadata__":{"k":)" + deep + "}}"), 0,
       absl::StatusCode::kInvalidArgument, "JSON nested deeper than 64 levels"},
      {"__metadata__ not an object", File(R"({"__metadata__":[1]})"), 0,
       absl::StatusCode::kInvalidArgument, "__metadata__ is not an object"},
      {"tensor entry not an object", File(R"({"t":5})"), 0, absl::StatusCode::kInvalidArgument,
       "tensor t is not an object"},
      {"tensor without dtype", File(R"({"t":{"shape":[1],"data_offsets":[0,1]}})"), 1,
       absl::StatusCode::kInvalidArgument, "has no string dtype"},
      {"tensor without shape", File(R"({"t":{"dtype":"U8","data_offsets":[0,1]}})"), 1,
       absl::StatusCode::kInvalidArgument, "has no shape array"},
      {"negative dimension", File(Tensor("U8", "[-1]", "[0,1]")), 1,
       absl::StatusCode::kInvalidArgument, "expected a non-negative integer"},
      {"fractional dimension", File(Tensor("U8", "[1.5]", "[0,1]")), 1,
       absl::StatusCode::kInvalidArgument, "expected a non-negative integer"},
      {"element count over 2^64 (unknown dtype)",
       File(Tensor("X9", "[4294967296,4294967296]", "[0,0]")), 0,
       absl::StatusCode::kInvalidArgument, "has more than 2^64 elements"},
      // 2^62 - 1 F4 elements are 2^64 - 4 bits; rounding them up to bytes
      // wrapped to 0 and matched an empty extent.
      {"F4 bit count whose rounding up wraps", File(Tensor("F4", "[4611686018427387903]", "[0,0]")),
       0, absl::StatusCode::kInvalidArgument,
       "needs 2305843009213693952 bytes but data_offsets span 0"},
      {"data_offsets missing", File(R"({"t":{"dtype":"U8","shape":[1]}})"), 1,
       absl::StatusCode::kInvalidArgument, "has no data_offsets [begin, end]"},
      {"data_offsets of three numbers", File(Tensor("U8", "[1]", "[0,1,2]")), 2,
       absl::StatusCode::kInvalidArgument, "has no data_offsets [begin, end]"},
      {"data_offsets begin > end", File(Tensor("U8", "[0]", "[4,0]")), 8,
       absl::StatusCode::kInvalidArgument, "has data_offsets begin 4 > end 0"},
      {"data_offsets past the end of the file", File(Tensor("U8", "[4]", "[0,4]")), 3,
       absl::StatusCode::kDataLoss, "extends past the end of the data section"},
      {"data_offsets end 2^64 - 1", File(Tensor("U8", "[4]", "[0,18446744073709551615]")), 4,
       absl::StatusCode::kDataLoss, "extends past the end of the data section"},
      {"shape and extent disagree", File(Tensor("BF16", "[4]", "[0,4]")), 4,
       absl::StatusCode::kInvalidArgument, "needs 8 bytes but data_offsets span 4"},
      {"overlapping tensors",
       File(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
            R"("b":{"dtype":"U8","shape":[4],"data_offsets":[3,7]}})"),
       8, absl::StatusCode::kInvalidArgument, "overlap"},
  };
  for (const Case& c : cases) {
    const absl::StatusOr<SafetensorsHeader> h =
        ParseSafetensorsHeader(c.file, c.file.size() + c.extra_bytes, "f");
    ASSERT_FALSE(h.ok()) << c.what;
    EXPECT_EQ(h.status().code(), c.code) << c.what << ": " << h.status();
    EXPECT_NE(h.status().message().find(c.message), std::string::npos)
        << c.what << ": " << h.status();
    EXPECT_EQ(h.status().message().substr(0, 3), "f: ") << c.what << ": " << h.status();
  }
}

TEST(SafetensorsMalformed, NestingUpToTheLimitIsAccepted) {
  const std::string nested = std::string(62, '[') + std::string(62, ']');  // 64 in all
  const std::string f = File(R"({"__metadata__":{"k":)" + nested + R"(,"s":"[[[[\"{{"}})");
  const absl::StatusOr<SafetensorsHeader> h = ParseSafetensorsHeader(f, f.size(), "f");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->metadata.at("k"), nested);
  EXPECT_EQ(h->metadata.at("s"), "[[[[\"{{");
}

TEST(SafetensorsIndex, WeightMapAndRefusals) {
  const auto m = ParseSafetensorsIndex(
      R"({"metadata": {"total_size": 1}, "weight_map": {
           "layers.1.engram.embed.weight": "model-00047-of-00048.safetensors",
           "layers.14.engram.embed.scale": "model-00048-of-00048.safetensors"}})",
      "index.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->size(), 2u);
  EXPECT_EQ(m->at("layers.1.engram.embed.weight"), "model-00047-of-00048.safetensors");
  const struct {
    const char* json;
    const char* message;
  } bad[] = {
      {"[", "index.json: "},
      {R"({"metadata": {}})", "no \"weight_map\" object"},
      {R"({"weight_map": {"a": 3}})", "weight_map[\"a\"] is not a file name"},
      {R"({"weight_map": {"a": "../x.safetensors"}})", "is not a file of the checkpoint"},
      {R"({"weight_map": {"a": ".."}})", "is not a file of the checkpoint"},
  };
  for (const auto& c : bad) {
    const auto r = ParseSafetensorsIndex(c.json, "index.json");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace engram
