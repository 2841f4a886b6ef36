#include "shard/import/gguf.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/gen/table_gen.h"
#include "common/testing/test_files.h"
#include "common/util/status_macros.h"
#include "gtest/gtest.h"
#include "shard/import/testing/gguf_writer.h"

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

// A deepseek41 GGUF of one Engram layer (id 1) with the given rows, primes
// ((max_ngram - 1) x heads of them), all-zero offsets and a tensor whose
// dims claim [264, rows] but that holds one row.
GgufWriter OneLayerGguf(uint64_t rows, uint64_t max_ngram, uint64_t heads,
                        const std::vector<uint64_t>& primes) {
  GgufWriter w;
  w.AddString("general.architecture", "deepseek41");
  w.AddString(kPrefix + "encoding", GgufEngramFile::kEncoding);
  w.AddIntArray(kPrefix + "layer_ids", GgufType::kU32, {1});
  w.AddIntArray(kPrefix + "rows", GgufType::kU64, {rows});
  w.AddIntArray(kPrefix + "token_map", GgufType::kU32, {0, 1});
  w.AddScalar(kPrefix + "compressed_vocab_size", GgufType::kU32, 2);
  w.AddScalar(kPrefix + "pad_id", GgufType::kU32, 0);
  w.AddScalar(kPrefix + "max_ngram_size", GgufType::kU32, max_ngram);
  w.AddScalar(kPrefix + "head_count", GgufType::kU32, heads);
  w.AddIntArray(kPrefix + "primes", GgufType::kU64, primes);
  w.AddIntArray(kPrefix + "offsets", GgufType::kU64, std::vector<uint64_t>(primes.size(), 0));
  w.AddIntArray(kPrefix + "multipliers", GgufType::kU64, std::vector<uint64_t>(max_ngram, 3));
  w.AddTensor("blk.1.engram_embd.weight", {GgufEngramFile::kRowBytes, rows}, kGgmlTypeI8,
              std::string(GgufEngramFile::kRowBytes, '\0'));
  return w;
}

TEST_F(GgufTest, PrimesWhoseSumWrapsAreRefused) {
  // 73,728 primes of 2^48 sum to 2^64 + 2^61, which wrapped to 2^61 = rows;
  // 2^61 rows of 264 bytes are 2^64 * 33 bytes, which wrapped to 0, so the
  // one-row tensor "fit" the file and the layout was accepted.
  const uint64_t p48 = uint64_t{1} << 48;
  ExpectError(OneLayerGguf(uint64_t{1} << 61, 19, 4096, std::vector<uint64_t>(18 * 4096, p48)),
              absl::StatusCode::kInvalidArgument,
              "rows[0] = 2305843009213693952 is outside 1..2^48");
  ExpectError(OneLayerGguf(p48, 2, 2, {p48 - 1, 2}), absl::StatusCode::kInvalidArgument,
              "primes[1] = 2 is out of range: layer 1's primes would sum past 2^48");
}

// The first bytes of a GGUF v3 header: magic, version, tensor and kv counts.
std::string HeaderStart(uint64_t n_tensors, uint64_t n_kv) {
  std::string h = "GGUF";
  auto put = [&h](auto v) { h.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(uint32_t{3});
  put(n_tensors);
  put(n_kv);
  return h;
}

// Writes `bytes` to `path`, then extends the file to `size` bytes (a hole).
void WriteSparse(const std::string& path, const std::string& bytes, uint64_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
  ::close(fd);
}

TEST_F(GgufTest, LengthsAreCheckedBeforeAllocating) {
  auto open_error = [&](const std::string& bytes, uint64_t size) {
    WriteSparse(path_, bytes, size);
    return GgufEngramFile::Open(path_).status();
  };
  auto put64 = [](std::string s, uint64_t v) {
    return s.append(reinterpret_cast<const char*>(&v), 8);
  };
  // A key claiming 1 GiB in a 40-byte file: the string was resized to
  // 1 GiB before the read found the file short.
  absl::Status s = open_error(put64(HeaderStart(0, 1), uint64_t{1} << 30), 40);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("string of 1073741824 bytes at byte 24 runs past the end of the "
                             "file (40 bytes)"),
            std::string::npos)
      << s;
  // Over 1 GiB: implausible whatever the file size.
  s = open_error(put64(HeaderStart(0, 1), (uint64_t{1} << 30) + 1), 40);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("is implausible"), std::string::npos) << s;

  // A u8 array of 2^24 + 1 elements (8 bytes each in memory) in a file
  // that holds them.
  std::string kv = put64(HeaderStart(0, 1), 1) + "k";
  kv.append("\x09\0\0\0\0\0\0\0", 8);  // type array, of u8
  s = open_error(put64(kv, (uint64_t{1} << 24) + 1), (uint64_t{1} << 24) + 100);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("metadata k is an integer array of 16777217 elements, more than "
                             "the 16777216 this reader keeps"),
            std::string::npos)
      << s;

  // 2^31 tensor infos in a 64 GB file (a hole): the infos were allocated
  // up front, 72 bytes each, 144 GB.
  s = open_error(HeaderStart(uint64_t{1} << 31, 0), uint64_t{64} << 30);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("0 metadata entries and 2147483648 tensors; more than 1048576 of "
                             "either is implausible"),
            std::string::npos)
      << s;
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
