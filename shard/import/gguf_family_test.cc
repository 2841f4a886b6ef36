// GgufEngramFile on every published DeepSeek-V4.1 GGUF family (llama.cpp,
// fork, ds4), split or not, and its one-line refusals of broken sets.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/codec/row_encoding.h"
#include "common/gen/table_gen.h"
#include "common/testing/test_files.h"
#include "common/util/status_macros.h"
#include "gtest/gtest.h"
#include "shard/import/gguf.h"
#include "shard/import/testing/gguf_writer.h"

namespace engram {
namespace {

using testing::GgufFamily;
using testing::GgufFamilyOptions;
using testing::GgufWriter;

constexpr uint64_t kSeed = 23;
const std::string kPrefix = "deepseek41.engram.";

// The small preset (layers 1 and 14, orders 2..4, 8 heads) with ~1,500
// rows a layer.
const HashLayout& Layout() {
  static const HashLayout* layout = [] {
    GenTableOptions o;
    o.preset = "small";
    o.engram_vocab_size = 60;
    return new HashLayout(*BuildPresetLayout(o));
  }();
  return *layout;
}

GgufFamilyOptions Family(GgufFamily family, RowEncoding encoding, int n_splits) {
  GgufFamilyOptions o;
  o.family = family;
  o.encoding = encoding;
  o.n_splits = n_splits;
  return o;
}

// Layer `layer`'s rows [first, first + n) as the fixture wrote them.
std::string WantRows(const GgufFamilyOptions& o, int layer, uint64_t first, uint64_t n) {
  std::string out;
  for (uint64_t r = first; r < first + n; ++r) {
    out += testing::FixtureRowBytes(o.encoding, kSeed, layer, r, o.head_dim);
  }
  return out;
}

class GgufFamilyTest : public ::testing::Test {
 protected:
  using Mutate = std::function<void(std::vector<GgufWriter>&)>;

  // Writes the family's files, after `mutate` edits their writers, and opens
  // split `open` (0-based) of them.
  absl::StatusOr<std::unique_ptr<GgufEngramFile>> WriteAndOpen(const GgufFamilyOptions& o,
                                                               const Mutate& mutate = nullptr,
                                                               int open = 0) {
    ASSIGN_OR_RETURN(std::vector<GgufWriter> w, testing::EngramGgufFamily(Layout(), o, kSeed));
    if (mutate) mutate(w);
    paths_ = testing::GgufFamilyPaths(dir_.path(), o);
    RETURN_IF_ERROR(testing::WriteGgufFiles(w, paths_));
    return GgufEngramFile::Open(paths_[open]);
  }

  // Expects WriteAndOpen to fail with `code` and a one-line message
  // containing `text`.
  void ExpectError(const GgufFamilyOptions& o, const Mutate& mutate, absl::StatusCode code,
                   const std::string& text, int open = 0) {
    absl::StatusOr<std::unique_ptr<GgufEngramFile>> f = WriteAndOpen(o, mutate, open);
    ASSERT_FALSE(f.ok()) << "expected an error mentioning " << text;
    EXPECT_EQ(f.status().code(), code) << f.status();
    EXPECT_NE(f.status().message().find(text), std::string::npos) << f.status();
    EXPECT_EQ(f.status().message().find('\n'), std::string::npos) << f.status();
  }

  testing::TempDir dir_;
  std::vector<std::string> paths_;
};

// The writer and tensor index of the table of Engram layer `layer_id`.
std::pair<GgufWriter*, int> Table(std::vector<GgufWriter>& w, int64_t layer_id) {
  const std::string name = absl::StrCat("blk.", layer_id, ".engram_embd.weight");
  for (GgufWriter& s : w) {
    if (int i = s.tensor_index(name); i >= 0) return {&s, i};
  }
  ADD_FAILURE() << "no tensor " << name;
  return {&w[0], 0};
}

struct Case {
  GgufFamily family;
  RowEncoding encoding;
  int n_splits;
};

class GgufFamilyReadTest : public GgufFamilyTest, public ::testing::WithParamInterface<Case> {};

TEST_P(GgufFamilyReadTest, ServesEveryLayerExactlyAsStoredFromAnySplit) {
  const Case c = GetParam();
  const GgufFamilyOptions o = Family(c.family, c.encoding, c.n_splits);
  const HashLayout& layout = Layout();
  const bool ds4 = c.family == GgufFamily::kDs4;
  const int want_row_bytes = *EncodedRowBytes(c.encoding, 256, ds4 ? 32 : 0);
  // The first split, then a middle one.
  for (int open : {0, c.n_splits / 2}) {
    SCOPED_TRACE(absl::StrCat("opened split ", open, " of ", c.n_splits));
    absl::StatusOr<std::unique_ptr<GgufEngramFile>> f = WriteAndOpen(o, nullptr, open);
    ASSERT_TRUE(f.ok()) << f.status();
    const GgufEngramFile& g = **f;
    EXPECT_EQ(g.family(), testing::GgufFamilyName(c.family));
    EXPECT_EQ(g.files(), paths_);
    EXPECT_EQ(g.name(), "engram-fixture");
    EXPECT_EQ(g.layout().ToJson(), layout.ToJson());
    ASSERT_EQ(g.n_layers(), layout.n_layers());
    for (int l = 0; l < g.n_layers(); ++l) {
      SCOPED_TRACE(absl::StrCat("layer ", l));
      EXPECT_EQ(g.encoding(l), c.encoding);
      EXPECT_EQ(g.head_dim(l), 256);
      EXPECT_EQ(g.scale_block(l), ds4 ? 32 : 0);
      ASSERT_EQ(g.row_bytes(l), want_row_bytes);
      const uint64_t rows = g.rows(l);
      ASSERT_EQ(rows, static_cast<uint64_t>(layout.table_rows[l]));
      std::string got(rows * want_row_bytes, '\0');
      ASSERT_TRUE(g.ReadRows(l, 0, rows, reinterpret_cast<uint8_t*>(got.data())).ok());
      EXPECT_TRUE(got == WantRows(o, l, 0, rows));
      // A few rows from the middle, and the last one.
      std::string part(5 * want_row_bytes, '\0');
      ASSERT_TRUE(g.ReadRows(l, rows / 2, 5, reinterpret_cast<uint8_t*>(part.data())).ok());
      EXPECT_TRUE(part == WantRows(o, l, rows / 2, 5));
      ASSERT_TRUE(g.ReadRows(l, rows - 1, 1, reinterpret_cast<uint8_t*>(part.data())).ok());
      EXPECT_TRUE(part.substr(0, want_row_bytes) == WantRows(o, l, rows - 1, 1));
      EXPECT_EQ(g.ReadRows(l, rows, 1, reinterpret_cast<uint8_t*>(part.data())).code(),
                absl::StatusCode::kOutOfRange);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GgufFamilyReadTest,
                         ::testing::Values(Case{GgufFamily::kLlamaCpp, RowEncoding::kQ8_0, 1},
                                           Case{GgufFamily::kLlamaCpp, RowEncoding::kQ8_0, 3},
                                           Case{GgufFamily::kLlamaCpp, RowEncoding::kQ3_K, 4},
                                           Case{GgufFamily::kLlamaCpp, RowEncoding::kQ2_K, 1},
                                           Case{GgufFamily::kLlamaCpp, RowEncoding::kQ4_K, 2},
                                           Case{GgufFamily::kLlamaCpp, RowEncoding::kQ5_K, 1},
                                           Case{GgufFamily::kLlamaCpp, RowEncoding::kQ6_K, 3},
                                           Case{GgufFamily::kLlamaCpp, RowEncoding::kBf16, 2},
                                           Case{GgufFamily::kLlamaCpp, RowEncoding::kF16, 1},
                                           Case{GgufFamily::kLlamaCpp, RowEncoding::kF32, 1},
                                           Case{GgufFamily::kFork, RowEncoding::kMxfp4, 12},
                                           Case{GgufFamily::kFork, RowEncoding::kMxfp4, 1},
                                           Case{GgufFamily::kDs4, RowEncoding::kFp8, 1},
                                           Case{GgufFamily::kDs4, RowEncoding::kFp8, 3}),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           std::string name = absl::StrCat(
                               std::string(testing::GgufFamilyName(p.param.family)), "_",
                               RowEncodingName(p.param.encoding), "_", p.param.n_splits, "splits");
                           for (char& ch : name) {
                             if (ch == '.') ch = '_';
                           }
                           return name;
                         });

TEST(GgufFixtureTest, RowsDecodeToFiniteValuesAndAreDeterministic) {
  for (RowEncoding e :
       {RowEncoding::kFp8, RowEncoding::kQ8_0, RowEncoding::kQ2_K, RowEncoding::kQ3_K,
        RowEncoding::kQ4_K, RowEncoding::kQ5_K, RowEncoding::kQ6_K, RowEncoding::kMxfp4,
        RowEncoding::kBf16, RowEncoding::kF16, RowEncoding::kF32}) {
    const int sb = e == RowEncoding::kFp8 ? 32 : 0;
    std::string rows;
    for (uint64_t r = 0; r < 64; ++r) rows += testing::FixtureRowBytes(e, kSeed, 1, r, 256);
    ASSERT_EQ(rows.size(), 64u * *EncodedRowBytes(e, 256, sb)) << RowEncodingName(e);
    std::vector<float> values(64 * 256);
    DecodeRows(e, reinterpret_cast<const uint8_t*>(rows.data()), 64, 256, sb, values.data());
    int nonzero = 0;
    for (float v : values) {
      ASSERT_TRUE(std::isfinite(v)) << RowEncodingName(e);
      nonzero += v != 0;
    }
    EXPECT_GT(nonzero, 64 * 256 / 2) << RowEncodingName(e);
    const std::string row0 = testing::FixtureRowBytes(e, kSeed, 1, 0, 256);
    EXPECT_EQ(rows.substr(0, row0.size()), row0) << RowEncodingName(e);
    EXPECT_NE(row0, testing::FixtureRowBytes(e, kSeed + 1, 1, 0, 256)) << RowEncodingName(e);
  }
}

TEST_F(GgufFamilyTest, LlamaCppDerivesWhatIsAbsentAndAcceptsEitherSpelling) {
  const GgufFamilyOptions o = Family(GgufFamily::kLlamaCpp, RowEncoding::kQ8_0, 1);
  const HashLayout& layout = Layout();
  absl::StatusOr<std::unique_ptr<GgufEngramFile>> f = WriteAndOpen(o, [&](auto& w) {
    for (const char* k : {"offsets", "max_ngram_size", "head_count"}) w[0].Remove(kPrefix + k);
    // The fork's spellings beside llama.cpp's, agreeing.
    w[0].AddScalar(kPrefix + "n_heads", GgufType::kU8, layout.n_heads);
    w[0].AddScalar(kPrefix + "head_dim", GgufType::kI64, 256);
  });
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->layout().ToJson(), layout.ToJson());
  EXPECT_EQ((*f)->family(), "fork");  // a fork spelling is present
}

TEST_F(GgufFamilyTest, RefusesSpellingsThatDisagree) {
  ExpectError(
      Family(GgufFamily::kLlamaCpp, RowEncoding::kQ8_0, 1),
      [](auto& w) { w[0].AddScalar(kPrefix + "n_heads", GgufType::kU32, 4); },
      absl::StatusCode::kInvalidArgument,
      "metadata deepseek41.engram.head_count and deepseek41.engram.n_heads disagree (8 vs 4)");
}

TEST_F(GgufFamilyTest, RefusesMissingKeysNamingBothSpellings) {
  const GgufFamilyOptions llama = Family(GgufFamily::kLlamaCpp, RowEncoding::kQ3_K, 1);
  ExpectError(
      llama, [](auto& w) { w[0].Remove(kPrefix + "key_length"); },
      absl::StatusCode::kInvalidArgument,
      "missing metadata deepseek41.engram.key_length (or deepseek41.engram.head_dim)");
  ExpectError(
      llama, [](auto& w) { w[0].Remove(kPrefix + "pad_id"); }, absl::StatusCode::kInvalidArgument,
      "missing metadata deepseek41.engram.pad_id (or deepseek41.engram.pad_token_id)");
  const GgufFamilyOptions fork = Family(GgufFamily::kFork, RowEncoding::kMxfp4, 12);
  ExpectError(
      fork, [](auto& w) { w[0].Remove(kPrefix + "multipliers"); },
      absl::StatusCode::kInvalidArgument, "missing metadata deepseek41.engram.multipliers");
  ExpectError(
      fork, [](auto& w) { w[0].Remove(kPrefix + "token_map"); }, absl::StatusCode::kInvalidArgument,
      "missing metadata deepseek41.engram.token_map", 5);
}

TEST_F(GgufFamilyTest, RefusesTablesOfTheWrongShapeOrType) {
  const GgufFamilyOptions o = Family(GgufFamily::kLlamaCpp, RowEncoding::kQ8_0, 3);
  const uint64_t rows = static_cast<uint64_t>(Layout().table_rows[0]);
  ExpectError(
      o,
      [&](auto& w) {
        Table(w, 1).first->set_tensor_dims(Table(w, 1).second, {128, rows});
      },
      absl::StatusCode::kInvalidArgument,
      absl::StrCat("tensor blk.1.engram_embd.weight has dims [128, ", rows, "]; want [256, ", rows,
                   "] (key_length, the layer's primes sum)"));
  ExpectError(
      o,
      [&](auto& w) {
        Table(w, 1).first->set_tensor_dims(Table(w, 1).second, {256, rows - 1});
      },
      absl::StatusCode::kInvalidArgument,
      absl::StrCat("has dims [256, ", rows - 1, "]; want [256, ", rows, "]"));
  ExpectError(
      o, [](auto& w) { Table(w, 14).first->set_tensor_type(Table(w, 14).second, 2); },
      absl::StatusCode::kInvalidArgument,
      absl::StrCat("tensor blk.14.engram_embd.weight has GGML type Q4_0; supported: ",
                   SupportedRowEncodings()));
  ExpectError(
      o, [](auto& w) { Table(w, 14).first->set_tensor_type(Table(w, 14).second, kGgmlTypeI8); },
      absl::StatusCode::kInvalidArgument, "has GGML type I8; supported: ");
  // 64 values a row hold no whole 256-value Q3_K block.
  GgufFamilyOptions narrow = o;
  narrow.head_dim = 64;
  ExpectError(
      narrow, [](auto& w) { Table(w, 1).first->set_tensor_type(Table(w, 1).second, 11); },
      absl::StatusCode::kInvalidArgument, "tensor blk.1.engram_embd.weight: ");
  ExpectError(
      o, [](auto& w) { w[2].Remove("split.no"); }, absl::StatusCode::kInvalidArgument,
      "named as split 3 of 3 but its header has no integer split.no");
}

TEST_F(GgufFamilyTest, RefusesPrimesThatDoNotSumToTheConfiguredRows) {
  std::vector<uint64_t> rows(Layout().table_rows.begin(), Layout().table_rows.end());
  rows[1] += 1;
  ExpectError(
      Family(GgufFamily::kFork, RowEncoding::kMxfp4, 12),
      [&](auto& w) { w[0].AddIntArray(kPrefix + "num_embeddings", GgufType::kU64, rows); },
      absl::StatusCode::kInvalidArgument,
      absl::StrCat("layer 14: primes sum to ", rows[1] - 1,
                   " but deepseek41.engram.num_embeddings says ", rows[1]));
}

TEST_F(GgufFamilyTest, RefusesTokenMapsOutOfRange) {
  std::vector<uint64_t> map(Layout().token_map.begin(), Layout().token_map.end());
  map[3] = ~uint64_t{0};  // -1 as an I32
  ExpectError(
      Family(GgufFamily::kLlamaCpp, RowEncoding::kQ8_0, 1),
      [&](auto& w) { w[0].AddIntArray(kPrefix + "token_map", GgufType::kI32, map); },
      absl::StatusCode::kInvalidArgument,
      "metadata deepseek41.engram.token_map holds the negative value -1");
  ExpectError(
      Family(GgufFamily::kFork, RowEncoding::kMxfp4, 1),
      [](auto& w) { w[0].AddScalar(kPrefix + "compressed_vocab_size", GgufType::kU32, 3); },
      absl::StatusCode::kInvalidArgument, "is not below compressed_vocab_size 3");
}

TEST_F(GgufFamilyTest, EverySplitMustBeThereAndNumbered) {
  const GgufFamilyOptions o = Family(GgufFamily::kFork, RowEncoding::kMxfp4, 12);
  ASSERT_TRUE(WriteAndOpen(o).ok());
  ASSERT_EQ(::unlink(paths_[4].c_str()), 0);
  absl::StatusOr<std::unique_ptr<GgufEngramFile>> f = GgufEngramFile::Open(paths_[2]);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound) << f.status();
  EXPECT_NE(
      f.status().message().find(absl::StrCat("split 5 of 12 is missing: cannot open ", paths_[4])),
      std::string::npos)
      << f.status();
  EXPECT_NE(f.status().message().find("engram-fixture-00005-of-00012.gguf"), std::string::npos);

  ExpectError(
      o, [](auto& w) { w[7].AddScalar("split.count", GgufType::kU16, 11); },
      absl::StatusCode::kInvalidArgument,
      "00008-of-00012.gguf: split.count is 11 but the file "
      "names say 12 splits");
  ExpectError(
      o, [](auto& w) { w[3].AddScalar("split.no", GgufType::kU16, 4); },
      absl::StatusCode::kInvalidArgument, "split.no is 4 but split 4 of 12 must say 3", 6);
  ExpectError(
      o, [](auto& w) { w[0].AddScalar("split.tensors.count", GgufType::kI32, 7); },
      absl::StatusCode::kInvalidArgument, "split.tensors.count says 7 tensors but the 12 splits");
  // A name out of its own range.
  f = GgufEngramFile::Open(dir_.Sub("engram-fixture-00013-of-00012.gguf"));
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  EXPECT_NE(f.status().message().find("the name says split 13 of 12"), std::string::npos);
}

TEST_F(GgufFamilyTest, SplitKeysAndSplitNamesGoTogether) {
  // A split's header under an unsplit name.
  absl::StatusOr<std::vector<GgufWriter>> w = testing::EngramGgufFamily(
      Layout(), Family(GgufFamily::kLlamaCpp, RowEncoding::kQ8_0, 3), kSeed);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)[0].Write(dir_.Sub("model.gguf")).ok());
  absl::StatusOr<std::unique_ptr<GgufEngramFile>> f = GgufEngramFile::Open(dir_.Sub("model.gguf"));
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  EXPECT_NE(f.status().message().find("header says split.no 0 of split.count 3 but the name is "
                                      "not PREFIX-NNNNN-of-NNNNN.gguf"),
            std::string::npos)
      << f.status();
  // An unsplit file under a split name.
  w = testing::EngramGgufFamily(Layout(), Family(GgufFamily::kLlamaCpp, RowEncoding::kQ8_0, 1),
                                kSeed);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)[0].Write(dir_.Sub("m-00001-of-00001.gguf")).ok());
  f = GgufEngramFile::Open(dir_.Sub("m-00001-of-00001.gguf"));
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  EXPECT_NE(f.status().message().find("named as split 1 of 1 but its header has no integer"),
            std::string::npos)
      << f.status();
}

TEST_F(GgufFamilyTest, TruncatedSplitIsDataLoss) {
  const GgufFamilyOptions o = Family(GgufFamily::kFork, RowEncoding::kMxfp4, 12);
  ASSERT_TRUE(WriteAndOpen(o).ok());
  // Layer 1 (id 14) is the last tensor of split 3.
  const std::string& split = paths_[2];
  struct stat st;
  ASSERT_EQ(::stat(split.c_str(), &st), 0);
  ASSERT_EQ(::truncate(split.c_str(), st.st_size - 1), 0);
  absl::StatusOr<std::unique_ptr<GgufEngramFile>> f = GgufEngramFile::Open(paths_[9]);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss) << f.status();
  EXPECT_NE(f.status().message().find(absl::StrCat(split, ": tensor blk.14.engram_embd.weight (",
                                                   Layout().table_rows[1], " rows of 136 bytes")),
            std::string::npos)
      << f.status();
  EXPECT_NE(f.status().message().find("truncated"), std::string::npos) << f.status();
}

TEST(GgmlTypeNameTest, NamesMxfp4) {
  EXPECT_EQ(GgmlTypeName(kGgmlTypeMxfp4), "MXFP4");
  EXPECT_EQ(GgmlTypeName(30), "BF16");
  EXPECT_EQ(GgmlTypeName(31), "type 31");
}

}  // namespace
}  // namespace engram
