#include "shard/gguf.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/table_gen.h"
#include "common/testing/test_files.h"
#include "gtest/gtest.h"
#include "shard/testing/gguf_writer.h"

namespace engram {
namespace {

using testing::EngramGguf;
using testing::GgufWriter;

constexpr uint64_t kSeed = 11;
const std::string kPrefix = "deepseek41.engram.";

const HashLayout& SmallLayout() {
  static const HashLayout* layout = [] {
    GenTableOptions o;
    o.preset = "small";
    o.engram_vocab_size = 300;
    absl::StatusOr<HashLayout> l = BuildPresetLayout(o);
    return new HashLayout(*std::move(l));
  }();
  return *layout;
}

class GgufTest : public ::testing::Test {
 protected:
  // Writes `w` and opens it.
  absl::StatusOr<std::unique_ptr<GgufEngramFile>> OpenWritten(const GgufWriter& w) {
    RETURN_IF_ERROR(w.Write(path_));
    return GgufEngramFile::Open(path_);
  }
  // Expects Open to fail with `code` and a message containing `text`.
  void ExpectError(const GgufWriter& w, absl::StatusCode code, const std::string& text) {
    absl::StatusOr<std::unique_ptr<GgufEngramFile>> f = OpenWritten(w);
    ASSERT_FALSE(f.ok()) << "expected an error mentioning " << text;
    EXPECT_EQ(f.status().code(), code) << f.status();
    EXPECT_NE(f.status().message().find(text), std::string::npos) << f.status();
  }

  testing::TempDir dir_;
  std::string path_ = dir_.Sub("model.gguf");
};

TEST_F(GgufTest, ReadsLayoutAndRows) {
  const HashLayout& layout = SmallLayout();
  absl::StatusOr<std::unique_ptr<GgufEngramFile>> f =
      OpenWritten(EngramGguf(layout, kSeed, /*alignment=*/16384));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->layout().ToJson(), layout.ToJson());
  EXPECT_EQ((*f)->name(), "test-engram");
  EXPECT_EQ((*f)->header().alignment, 16384u);
  EXPECT_EQ((*f)->header().data_start % 16384, 0u);
  for (int l = 0; l < layout.n_layers(); ++l) {
    const uint64_t rows = (*f)->rows(l);
    ASSERT_EQ(rows, static_cast<uint64_t>(layout.table_rows[l]));
    std::vector<uint8_t> got(rows * 264), want(rows * 264);
    ASSERT_TRUE((*f)->ReadRows(l, 0, rows, got.data()).ok());
    GenerateRows(kSeed, l, 0, rows, 256, 32, want.data());
    EXPECT_EQ(got, want) << "layer " << l;
  }
  std::vector<uint8_t> one(264);
  EXPECT_EQ((*f)->ReadRows(0, (*f)->rows(0), 1, one.data()).code(), absl::StatusCode::kOutOfRange);
}

TEST_F(GgufTest, AcceptsAnyIntegerTypeAndOptionalKeys) {
  const HashLayout& layout = SmallLayout();
  GgufWriter w = EngramGguf(layout, kSeed);
  auto u = [](const auto& v) { return std::vector<uint64_t>(v.begin(), v.end()); };
  w.AddIntArray(kPrefix + "rows", GgufType::kU64, u(layout.table_rows));
  w.AddIntArray(kPrefix + "layer_ids", GgufType::kI8, u(layout.engram_layer_ids));
  w.AddIntArray(kPrefix + "token_map", GgufType::kI32, u(layout.token_map));
  w.AddScalar(kPrefix + "pad_id", GgufType::kU64, static_cast<uint64_t>(layout.pad_id));
  std::vector<uint64_t> primes, offsets;
  for (int l = 0; l < layout.n_layers(); ++l) {
    for (const auto& order : layout.primes[l])
      primes.insert(primes.end(), order.begin(), order.end());
    offsets.insert(offsets.end(), layout.offsets[l].begin(), layout.offsets[l].end());
  }
  w.AddIntArray(kPrefix + "primes", GgufType::kU16, primes);
  w.AddIntArray(kPrefix + "offsets", GgufType::kI64, offsets);
  w.AddScalar(kPrefix + "max_ngram_size", GgufType::kU8, layout.max_ngram_size);
  w.AddScalar(kPrefix + "head_count", GgufType::kI32, layout.n_heads);
  absl::StatusOr<std::unique_ptr<GgufEngramFile>> f = OpenWritten(w);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->layout().ToJson(), layout.ToJson());
}

TEST_F(GgufTest, RefusesRequantisedEncodingsByName) {
  GgufWriter w = EngramGguf(SmallLayout(), kSeed);
  w.AddString(kPrefix + "encoding", "q8_0");
  ExpectError(w, absl::StatusCode::kInvalidArgument, "'q8_0'");
  w.AddString(kPrefix + "encoding", "q3_K");
  ExpectError(w, absl::StatusCode::kInvalidArgument, "'q3_K'");
  w.Remove(kPrefix + "encoding");
  ExpectError(w, absl::StatusCode::kInvalidArgument, "encoding");
}

TEST_F(GgufTest, RefusesEngramTensorOfAnotherType) {
  GgufWriter w = EngramGguf(SmallLayout(), kSeed);
  w.set_tensor_type(1, 8);  // layer 0's table re-quantised to Q8_0
  ExpectError(w, absl::StatusCode::kInvalidArgument, "GGML type Q8_0");
}

TEST_F(GgufTest, RefusesPrimesThatDoNotSumToRows) {
  const HashLayout& layout = SmallLayout();
  GgufWriter w = EngramGguf(layout, kSeed);
  std::vector<uint64_t> rows(layout.table_rows.begin(), layout.table_rows.end());
  rows[1] += 1;
  w.AddIntArray(kPrefix + "rows", GgufType::kU32, rows);
  ExpectError(w, absl::StatusCode::kInvalidArgument, "primes sum to");
}

TEST_F(GgufTest, RefusesTensorShapeThatDisagreesWithPrimes) {
  const HashLayout& layout = SmallLayout();
  GgufWriter w = EngramGguf(layout, kSeed);
  const uint64_t rows = static_cast<uint64_t>(layout.table_rows[0]) - 1;
  std::vector<uint64_t> ids(layout.engram_layer_ids.begin(), layout.engram_layer_ids.end());
  ids[0] = 98;
  w.AddIntArray(kPrefix + "layer_ids", GgufType::kU32, ids);
  w.AddTensor("blk.98.engram_embd.weight", {264, rows}, kGgmlTypeI8, std::string(rows * 264, 0));
  ExpectError(w, absl::StatusCode::kInvalidArgument, "has dims [264, ");
}

TEST_F(GgufTest, RefusesMisalignedOffsets) {
  GgufWriter w = EngramGguf(SmallLayout(), kSeed);
  w.set_offset_skew(1, 8);  // the first Engram tensor
  ExpectError(w, absl::StatusCode::kInvalidArgument, "not a multiple of the alignment 32");
  GgufWriter w2 = EngramGguf(SmallLayout(), kSeed);
  w2.AddScalar("general.alignment", GgufType::kU32, 48);
  ExpectError(w2, absl::StatusCode::kInvalidArgument, "power of two");
}

TEST_F(GgufTest, RefusesOtherFiles) {
  GgufWriter w = EngramGguf(SmallLayout(), kSeed);
  w.AddString("general.architecture", "llama");
  ExpectError(w, absl::StatusCode::kInvalidArgument, "'llama'");
  GgufWriter w2 = EngramGguf(SmallLayout(), kSeed);
  w2.Remove(kPrefix + "primes");
  ExpectError(w2, absl::StatusCode::kInvalidArgument, "missing metadata deepseek41.engram.primes");
  GgufWriter w3 = EngramGguf(SmallLayout(), kSeed);
  w3.AddString(kPrefix + "rows", "many");
  ExpectError(w3, absl::StatusCode::kInvalidArgument, "must be an integer array");

  ASSERT_TRUE(GgufWriter().Write(path_).ok());
  int fd = ::open(path_.c_str(), O_WRONLY | O_TRUNC);
  ASSERT_EQ(::write(fd, "GGML\3\0\0\0", 8), 8);
  ::close(fd);
  absl::StatusOr<std::unique_ptr<GgufEngramFile>> f = GgufEngramFile::Open(path_);
  EXPECT_NE(f.status().message().find("not a GGUF file"), std::string::npos) << f.status();
  EXPECT_EQ(GgufEngramFile::Open(dir_.Sub("absent.gguf")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(GgufTest, TruncatedFilesAreDataLossAtEveryCut) {
  const std::string full = EngramGguf(SmallLayout(), kSeed).Build();
  absl::StatusOr<std::unique_ptr<GgufEngramFile>> ok = [&] {
    GgufWriter w = EngramGguf(SmallLayout(), kSeed);
    return OpenWritten(w);
  }();
  ASSERT_TRUE(ok.ok()) << ok.status();
  const uint64_t data_start = (*ok)->header().data_start;
  // Cuts inside the header (dense near the start), then inside the data.
  std::vector<uint64_t> cuts;
  for (uint64_t c = 0; c < 600; c += 7) cuts.push_back(c);
  for (uint64_t c = 600; c < data_start; c += data_start / 50 + 1) cuts.push_back(c);
  cuts.push_back(data_start + 100);
  cuts.push_back(full.size() - 1);
  for (uint64_t cut : cuts) {
    int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_EQ(::write(fd, full.data(), cut), static_cast<ssize_t>(cut));
    ::close(fd);
    absl::StatusOr<std::unique_ptr<GgufEngramFile>> f = GgufEngramFile::Open(path_);
    ASSERT_FALSE(f.ok()) << "cut at " << cut;
    if (cut >= 4) {
      EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss)
          << "cut at " << cut << ": " << f.status();
      EXPECT_NE(f.status().message().find("truncated"), std::string::npos) << f.status();
    }
  }
}

TEST(GgmlTypeNameTest, NamesCommonTypes) {
  EXPECT_EQ(GgmlTypeName(8), "Q8_0");
  EXPECT_EQ(GgmlTypeName(11), "Q3_K");
  EXPECT_EQ(GgmlTypeName(24), "I8");
  EXPECT_EQ(GgmlTypeName(4), "type 4");
  EXPECT_EQ(GgmlTypeName(1000), "type 1000");
}

}  // namespace
}  // namespace engram
