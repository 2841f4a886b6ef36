#include "common/format/table.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/format/safetensors.h"

namespace engram {
namespace {

namespace fs = std::filesystem;

constexpr int kHeadDim = 64, kBlock = 32, kRowBytes = 66;

// Two layers (ids 1, 14), orders 2..3, 2 heads: 2032 and 2168 rows.
HashLayout TestLayout() {
  HashLayout l;
  l.vocab_size = 16;
  l.engram_layer_ids = {1, 14};
  l.max_ngram_size = 3;
  l.n_heads = 2;
  l.pad_id = 2;
  for (int t = 0; t < 16; ++t) l.token_map.push_back(t % 10);
  l.multipliers = {{3, 5, 7}, {11, 13, 17}};
  l.primes = {{{499, 503}, {509, 521}}, {{523, 541}, {547, 557}}};
  for (const auto& layer : l.primes) {
    std::vector<int64_t> off;
    int64_t rows = 0;
    for (const auto& order : layer) {
      for (int64_t p : order) {
        off.push_back(rows);
        rows += p;
      }
    }
    l.offsets.push_back(off);
    l.table_rows.push_back(rows);
  }
  return l;
}

uint8_t Byte(int layer, uint64_t row, int j) {
  return static_cast<uint8_t>((row * 131 + j * 7 + layer * 59 + (row >> 3)) ^ (j * row));
}

std::vector<uint8_t> LayerRows(int layer, uint64_t rows) {
  std::vector<uint8_t> v(rows * kRowBytes);
  for (uint64_t r = 0; r < rows; ++r) {
    for (int j = 0; j < kRowBytes; ++j) v[r * kRowBytes + j] = Byte(layer, r, j);
  }
  return v;
}

class TableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           (std::string("table_test_") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the test table to dir_, layers interleaved, uneven chunks.
  void WriteTable() {
    absl::StatusOr<TableManifest> m =
        TableManifest::ForLayout("test", 7, TestLayout(), kHeadDim, kBlock);
    ASSERT_TRUE(m.ok()) << m.status();
    auto w = TableWriter::Create(dir_.string(), *m);
    ASSERT_TRUE(w.ok()) << w.status();
    std::vector<std::vector<uint8_t>> data;
    std::vector<uint64_t> pos;
    for (int l = 0; l < 2; ++l) {
      data.push_back(LayerRows(l, m->layers[l].rows));
      pos.push_back(0);
    }
    const uint64_t chunks[] = {1, 7, 1000, 3, 500};
    for (int step = 0; pos[0] < m->layers[0].rows || pos[1] < m->layers[1].rows; ++step) {
      const int l = step % 2;
      const uint64_t n = std::min(chunks[step % 5], m->layers[l].rows - pos[l]);
      ASSERT_TRUE((*w)->AppendRows(l, data[l].data() + pos[l] * kRowBytes, n).ok());
      pos[l] += n;
    }
    ASSERT_TRUE((*w)->Finish().ok());
  }

  std::string RowsPath() const { return (dir_ / "rows.safetensors").string(); }

  fs::path dir_;
};

TEST_F(TableTest, WriteReadVerify) {
  WriteTable();
  auto r = TableReader::Open(dir_.string());
  ASSERT_TRUE(r.ok()) << r.status();
  const TableManifest& m = (*r)->manifest();
  EXPECT_EQ(m.table, "test");
  EXPECT_EQ(m.version, 7u);
  ASSERT_EQ(m.layers.size(), 2u);
  EXPECT_EQ(m.layers[0].rows, 2032u);
  EXPECT_EQ(m.layers[1].rows, 2168u);
  EXPECT_EQ(m.layers[1].weight_tensor, "layers.14.engram.embed.weight");
  EXPECT_EQ(m.layers[1].scale_tensor, "layers.14.engram.embed.scale");
  EXPECT_EQ((*r)->safetensors_header().data_start % 8, 0u);

  for (int l = 0; l < 2; ++l) {
    const std::vector<uint8_t> want = LayerRows(l, m.layers[l].rows);
    EXPECT_EQ(m.layers[l].checksum, FormatChecksum(XXH3_64bits(want.data(), want.size())));
    std::vector<uint8_t> got(want.size());
    ASSERT_TRUE((*r)->ReadRows(l, 0, m.layers[l].rows, got.data()).ok());
    EXPECT_EQ(got, want);
    // Partial ranges and single rows.
    std::vector<uint8_t> part(37 * kRowBytes);
    ASSERT_TRUE((*r)->ReadRows(l, 1000, 37, part.data()).ok());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), want.begin() + 1000 * kRowBytes));
    uint8_t row[kRowBytes];
    const uint64_t last = m.layers[l].rows - 1;
    ASSERT_TRUE((*r)->ReadRow(l, last, row).ok());
    EXPECT_TRUE(std::equal(row, row + kRowBytes, want.begin() + last * kRowBytes));
  }
  uint64_t calls = 0, last_done = 0, last_total = 0;
  EXPECT_TRUE((*r)->VerifyChecksums([&](uint64_t done, uint64_t total) {
                    ++calls;
                    last_done = done;
                    last_total = total;
                  })
                  .ok());
  EXPECT_GT(calls, 0u);
  EXPECT_EQ(last_done, 2032u + 2168u);
  EXPECT_EQ(last_total, 2032u + 2168u);
}

TEST_F(TableTest, ReadBoundsChecked) {
  WriteTable();
  auto r = TableReader::Open(dir_.string());
  ASSERT_TRUE(r.ok()) << r.status();
  uint8_t buf[2 * kRowBytes];
  EXPECT_EQ((*r)->ReadRow(2, 0, buf).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*r)->ReadRow(-1, 0, buf).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*r)->ReadRow(0, 2032, buf).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*r)->ReadRows(0, 2031, 2, buf).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*r)->ReadRows(0, 1, UINT64_MAX, buf).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE((*r)->ReadRows(0, 2032, 0, buf).ok());
}

TEST_F(TableTest, ManifestRoundTrip) {
  WriteTable();
  auto m = TableManifest::Load(dir_.string());
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string text = m->ToJson();
  auto j = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["format"], "engram-table");
  EXPECT_EQ(j["format_version"], 1);
  EXPECT_EQ(j["rows_file"], "rows.safetensors");
  EXPECT_EQ(j["layers"][0]["layer_id"], 1);
  EXPECT_EQ(j["layers"][0]["row_bytes"], kRowBytes);
  EXPECT_EQ(j["layers"][0]["weight_dtype"], "F8_E4M3");
  EXPECT_EQ(j["layers"][0]["scale_dtype"], "F8_E8M0");
  EXPECT_EQ(j["layout"]["table_rows"][1], 2168);
  auto again = TableManifest::FromJson(text);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->ToJson(), text);
  // The layout reads back through HashLayout::FromFile too.
  auto layout = HashLayout::FromFile((dir_ / "manifest.json").string());
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->ToJson(), TestLayout().ToJson());
}

TEST_F(TableTest, TruncatedRowsFile) {
  WriteTable();
  fs::resize_file(RowsPath(), fs::file_size(RowsPath()) - 100);
  auto r = TableReader::Open(dir_.string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find("rows.safetensors"), std::string::npos);
  EXPECT_NE(r.status().message().find("layers.14.engram.embed.scale"), std::string::npos)
      << r.status();
  // Truncated inside the header.
  fs::resize_file(RowsPath(), 40);
  r = TableReader::Open(dir_.string());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
}

TEST_F(TableTest, ManifestRowsDisagreeWithShape) {
  WriteTable();
  auto m = TableManifest::Load(dir_.string());
  ASSERT_TRUE(m.ok());
  m->layers[0].rows += 1;
  m->layout.table_rows[0] += 1;
  ASSERT_TRUE(m->Save(dir_.string()).ok());
  auto r = TableReader::Open(dir_.string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("layers.1.engram.embed.weight"), std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("shape"), std::string::npos);

  // A manifest whose rows disagree with its own layout is rejected on load.
  m->layout.table_rows[0] -= 1;
  EXPECT_FALSE(m->Validate(true).ok());
  EXPECT_FALSE(m->Save(dir_.string()).ok());
}

TEST_F(TableTest, FlippedByteFailsVerify) {
  WriteTable();
  auto r0 = TableReader::Open(dir_.string());
  ASSERT_TRUE(r0.ok());
  const uint64_t off = (*r0)->safetensors_header().data_start + 12345;
  r0->reset();
  const int fd = ::open(RowsPath().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  uint8_t b;
  ASSERT_EQ(::pread(fd, &b, 1, off), 1);
  b ^= 0x10;
  ASSERT_EQ(::pwrite(fd, &b, 1, off), 1);
  ::close(fd);
  auto r = TableReader::Open(dir_.string());
  ASSERT_TRUE(r.ok()) << r.status();
  const absl::Status s = (*r)->VerifyChecksums();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos);
}

TEST_F(TableTest, ExtraTensorsAnyOrderTolerated) {
  WriteTable();
  auto m = TableManifest::Load(dir_.string());
  ASSERT_TRUE(m.ok());
  const std::vector<uint8_t> l0 = LayerRows(0, 2032), l1 = LayerRows(1, 2168);
  auto split = [](const std::vector<uint8_t>& rows, bool scale) {
    std::vector<uint8_t> out;
    for (size_t r = 0; r < rows.size() / kRowBytes; ++r) {
      const auto* p = rows.data() + r * kRowBytes;
      if (scale) {
        out.insert(out.end(), p + kHeadDim, p + kRowBytes);
      } else {
        out.insert(out.end(), p, p + kHeadDim);
      }
    }
    return out;
  };
  // Data order: norm, scale14, weight1, extra, weight14, scale1.
  struct Part {
    SafetensorsTensor t;
    std::vector<uint8_t> bytes;
  };
  std::vector<Part> parts = {
      {{"model.norm.weight", "BF16", {4}, 0, 0}, std::vector<uint8_t>(8, 0x3F)},
      {{"layers.14.engram.embed.scale", "F8_E8M0", {2168, 2}, 0, 0}, split(l1, true)},
      {{"layers.1.engram.embed.weight", "F8_E4M3", {2032, 64}, 0, 0}, split(l0, false)},
      {{"layers.1.ffn.w1", "F32", {2, 3}, 0, 0}, std::vector<uint8_t>(24, 1)},
      {{"layers.14.engram.embed.weight", "F8_E4M3", {2168, 64}, 0, 0}, split(l1, false)},
      {{"layers.1.engram.embed.scale", "F8_E8M0", {2032, 2}, 0, 0}, split(l0, true)},
  };
  uint64_t cur = 0;
  std::vector<SafetensorsTensor> tensors;
  for (Part& p : parts) {
    p.t.begin = cur;
    cur += p.bytes.size();
    p.t.end = cur;
  }
  for (int i : {3, 0, 5, 1, 4, 2}) tensors.push_back(parts[i].t);  // JSON order
  std::string file = BuildSafetensorsHeader(tensors, {{"format", "pt"}});
  for (const Part& p : parts) file.append(p.bytes.begin(), p.bytes.end());
  fs::remove(RowsPath());
  m->rows_file = "model-00001.safetensors";
  {
    FILE* f = std::fopen((dir_ / m->rows_file).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(file.data(), 1, file.size(), f), file.size());
    std::fclose(f);
  }
  ASSERT_TRUE(m->Save(dir_.string()).ok());

  auto h = ReadSafetensorsHeader((dir_ / m->rows_file).string());
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->tensors.size(), 6u);
  EXPECT_EQ(h->metadata.at("format"), "pt");

  auto r = TableReader::Open(dir_.string());
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<uint8_t> got(l1.size());
  ASSERT_TRUE((*r)->ReadRows(1, 0, 2168, got.data()).ok());
  EXPECT_EQ(got, l1);
  got.resize(l0.size());
  ASSERT_TRUE((*r)->ReadRows(0, 0, 2032, got.data()).ok());
  EXPECT_EQ(got, l0);
  EXPECT_TRUE((*r)->VerifyChecksums().ok());
}

TEST_F(TableTest, WriterErrorsLeaveNoManifest) {
  absl::StatusOr<TableManifest> m =
      TableManifest::ForLayout("test", 1, TestLayout(), kHeadDim, kBlock);
  ASSERT_TRUE(m.ok());
  auto w = TableWriter::Create(dir_.string(), *m);
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<uint8_t> rows = LayerRows(0, 2032);
  EXPECT_TRUE((*w)->AppendRows(0, rows.data(), 2000).ok());
  EXPECT_EQ((*w)->AppendRows(0, rows.data(), 33).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*w)->AppendRows(5, rows.data(), 1).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*w)->Finish().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(dir_ / "manifest.json"));
  EXPECT_EQ(TableReader::Open(dir_.string()).status().code(), absl::StatusCode::kNotFound);

  // Geometry errors are caught at Create.
  m->layers[0].scale_block = 48;
  EXPECT_FALSE(TableWriter::Create(dir_.string(), *m).ok());
}

// --- safetensors header parser

std::string Header(const std::string& json_text, uint64_t declared_len = 0) {
  std::string out(8, '\0');
  uint64_t n = declared_len ? declared_len : json_text.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xFF);
  return out + json_text;
}

TEST(Safetensors, ParsesAndRejects) {
  const std::string ok_json = R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                              R"("b":{"dtype":"X9","shape":[3],"data_offsets":[16,19]},)"
                              R"("__metadata__":{"k":"v"}})";
  std::string f = Header(ok_json);
  auto h = ParseSafetensorsHeader(f, f.size() + 19, "f");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->data_start, f.size());
  ASSERT_NE(h->Find("a"), nullptr);
  EXPECT_EQ(h->Find("a")->shape, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(h->Find("b")->dtype, "X9");  // unknown dtypes tolerated
  EXPECT_EQ(h->metadata.at("k"), "v");

  // Past the end of the file.
  EXPECT_EQ(ParseSafetensorsHeader(f, f.size() + 18, "f").status().code(),
            absl::StatusCode::kDataLoss);
  // Header longer than 100 MB, or than the file.
  std::string big = Header(ok_json, (100ull << 20) + 1);
  EXPECT_EQ(ParseSafetensorsHeader(big, 1ull << 40, "f").status().code(),
            absl::StatusCode::kInvalidArgument);
  std::string longer = Header(ok_json, ok_json.size() + 100);
  EXPECT_EQ(ParseSafetensorsHeader(longer, longer.size(), "f").status().code(),
            absl::StatusCode::kDataLoss);
  // Overlap.
  std::string overlap = Header(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                               R"("b":{"dtype":"U8","shape":[4],"data_offsets":[3,7]}})");
  EXPECT_EQ(ParseSafetensorsHeader(overlap, overlap.size() + 8, "f").status().code(),
            absl::StatusCode::kInvalidArgument);
  // Shape * dtype size != extent.
  std::string extent = Header(R"({"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,4]}})");
  auto e = ParseSafetensorsHeader(extent, extent.size() + 8, "f");
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("needs 8 bytes"), std::string::npos) << e.status();
  // Not JSON; begin > end.
  std::string junk = Header("{not json");
  EXPECT_FALSE(ParseSafetensorsHeader(junk, junk.size(), "f").ok());
  std::string rev = Header(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})");
  EXPECT_FALSE(ParseSafetensorsHeader(rev, rev.size() + 8, "f").ok());
}

TEST(Safetensors, BuildPadsToEight) {
  for (int n = 1; n < 12; ++n) {
    std::vector<SafetensorsTensor> t = {{std::string(n, 'x'), "U8", {3}, 0, 3}};
    const std::string h = BuildSafetensorsHeader(t, {});
    EXPECT_EQ(h.size() % 8, 0u);
    auto p = ParseSafetensorsHeader(h, h.size() + 3, "built");
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->data_start, h.size());
    EXPECT_EQ(p->tensors[0].name, std::string(n, 'x'));
  }
}

}  // namespace
}  // namespace engram
