#include "common/gen/table_gen.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/codec/fp8.h"
#include "common/codec/row_encoding.h"
#include "common/format/table.h"
#include "common/util/status_macros.h"

namespace engram {
namespace {

namespace fs = std::filesystem;

fs::path TestDir(const std::string& tag) {
  fs::path d =
      fs::path(::testing::TempDir()) / ("table_gen_test_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

TEST(WalkPrimes, TinyVocab) {
  const auto p = WalkPrimes(2, 3, 2, 10);
  const std::vector<std::vector<std::vector<int64_t>>> want = {{{11, 13}, {17, 19}, {23, 29}},
                                                               {{31, 37}, {41, 43}, {47, 53}}};
  EXPECT_EQ(p, want);
}

TEST(WalkPrimes, RestartSkipsUsedButFindsSmallerUnused) {
  // Each (layer, order) restarts from vocab - 1: with one head per order the
  // walk takes the next unused prime above vocab - 1 every time.
  const auto p = WalkPrimes(1, 3, 1, 2);
  const std::vector<std::vector<std::vector<int64_t>>> want = {{{2}, {3}, {5}}};
  EXPECT_EQ(p, want);
}

TEST(BuildPresetLayout, V41) {
  GenTableOptions o;
  o.preset = "v41";
  o.engram_vocab_size = 100000;
  auto l = BuildPresetLayout(o);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(l->Validate().ok());
  EXPECT_EQ(l->engram_layer_ids, (std::vector<int64_t>{1, 14}));
  EXPECT_EQ(l->max_ngram_size, 4);
  EXPECT_EQ(l->n_heads, 8);
  EXPECT_EQ(l->n_cols(), 24);
  EXPECT_EQ(l->multipliers, (std::vector<std::vector<int64_t>>{
                                {76632096046245, 4839876093313, 35959672319349, 73987337458391},
                                {67716810739261, 51510806800915, 30921347202721, 82619226485591}}));
  std::set<int64_t> primes;
  for (int layer = 0; layer < 2; ++layer) {
    int64_t rows = 0;
    for (int c = 0; c < 24; ++c) {
      EXPECT_EQ(l->offsets[layer][c], rows);
      EXPECT_GT(l->prime(layer, c), 99999);
      primes.insert(l->prime(layer, c));
      rows += l->prime(layer, c);
    }
    EXPECT_EQ(l->table_rows[layer], rows);
  }
  EXPECT_EQ(primes.size(), 48u);
  EXPECT_EQ(*primes.begin(), 100003);  // the first prime above 99999
  ASSERT_EQ(l->vocab_size, 129280);
  ASSERT_EQ(l->token_map.size(), 129280u);
  EXPECT_EQ(l->pad_id, 2);
  EXPECT_EQ(l->dead_id, -1);
  EXPECT_EQ(l->token_map[2], 2);
  std::vector<bool> hit(99092, false);
  int64_t max_id = 0;
  for (int64_t v : l->token_map) {
    ASSERT_GE(v, 0);
    ASSERT_LT(v, 99092);
    hit[v] = true;
    max_id = std::max(max_id, v);
  }
  EXPECT_EQ(max_id, 99091);
  EXPECT_TRUE(std::all_of(hit.begin(), hit.end(), [](bool b) { return b; }));

  // Deterministic per seed.
  auto again = BuildPresetLayout(o);
  EXPECT_EQ(again->token_map, l->token_map);
  o.seed = 2;
  auto other = BuildPresetLayout(o);
  EXPECT_NE(other->token_map, l->token_map);
  EXPECT_EQ(other->token_map[2], 2);
}

TEST(BuildPresetLayout, Overrides) {
  const fs::path dir = TestDir("overrides");
  fs::create_directories(dir);
  GenTableOptions o;
  o.layout_file = std::string(ENGRAM_GOLDEN_DIR) + "/engram_hash_small.json";
  auto golden = BuildPresetLayout(o);
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto direct = HashLayout::FromFile(o.layout_file);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(golden->ToJson(), direct->ToJson());

  const std::string tm = (dir / "tm.json").string();
  std::vector<int64_t> map(golden->vocab_size);
  for (size_t i = 0; i < map.size(); ++i) map[i] = static_cast<int64_t>(i % 5);
  {
    std::ofstream f(tm);
    f << "{\"pad_id\": 1, \"token_map\": [";
    for (size_t i = 0; i < map.size(); ++i) f << (i ? "," : "") << map[i];
    f << "]}";
  }
  o.token_map_file = tm;
  auto mapped = BuildPresetLayout(o);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ(mapped->token_map, map);
  EXPECT_EQ(mapped->pad_id, 1);

  GenTableOptions bad;
  bad.preset = "huge";
  EXPECT_EQ(BuildPresetLayout(bad).status().code(), absl::StatusCode::kInvalidArgument);
  int hd, sb;
  bad.preset = "small";
  ASSERT_TRUE(ResolveGeometry(bad, &hd, &sb).ok());
  EXPECT_EQ(hd, 64);
  EXPECT_EQ(sb, 32);
  bad.head_dim = 96;
  ASSERT_TRUE(ResolveGeometry(bad, &hd, &sb).ok());
  EXPECT_EQ(hd, 96);
  bad.scale_block = 64;
  EXPECT_FALSE(ResolveGeometry(bad, &hd, &sb).ok());
  fs::remove_all(dir);
}

class GenTableTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const auto& d : dirs_) fs::remove_all(d);
  }
  absl::StatusOr<TableManifest> Gen(uint64_t seed, const std::string& tag,
                                    RowEncoding encoding = RowEncoding::kFp8, int head_dim = 0) {
    GenTableOptions o;
    o.out_dir = TestDir(tag).string();
    dirs_.push_back(o.out_dir);
    o.preset = "small";
    o.engram_vocab_size = 300;
    o.seed = seed;
    o.encoding = encoding;
    o.head_dim = head_dim;
    uint64_t last = 0, total = 0;
    RETURN_IF_ERROR(GenerateTable(o, [&](uint64_t d, uint64_t t) {
      EXPECT_GE(d, last);
      last = d;
      total = t;
    }));
    EXPECT_EQ(last, total);
    return TableManifest::Load(o.out_dir);
  }
  // Gen, then the table opened and its checksums verified; null (with the
  // failure reported) otherwise.
  std::unique_ptr<TableReader> GenVerified(uint64_t seed, const std::string& tag,
                                           RowEncoding encoding = RowEncoding::kFp8,
                                           int head_dim = 0) {
    absl::StatusOr<TableManifest> m = Gen(seed, tag, encoding, head_dim);
    if (!m.ok()) {
      ADD_FAILURE() << m.status();
      return nullptr;
    }
    absl::StatusOr<std::unique_ptr<TableReader>> r = TableReader::Open(dirs_.back());
    if (!r.ok()) {
      ADD_FAILURE() << r.status();
      return nullptr;
    }
    if (absl::Status s = (*r)->VerifyChecksums(); !s.ok()) {
      ADD_FAILURE() << s;
      return nullptr;
    }
    EXPECT_EQ((*r)->manifest().layers.size(), 2u);
    return *std::move(r);
  }
  std::vector<std::string> dirs_;
};

TEST_F(GenTableTest, RowsMatchGenerateRowAndVerify) {
  std::unique_ptr<TableReader> r = GenVerified(7, "a");
  ASSERT_NE(r, nullptr);
  const TableManifest& man = r->manifest();
  ASSERT_EQ(man.layers.size(), 2u);
  std::vector<uint64_t> hist(256, 0);
  uint64_t bytes = 0;
  for (int l = 0; l < 2; ++l) {
    const LayerInfo& li = man.layers[l];
    EXPECT_EQ(li.head_dim, 64);
    EXPECT_EQ(li.row_bytes, 66);
    EXPECT_EQ(static_cast<int64_t>(li.rows), man.layout.table_rows[l]);
    std::vector<uint8_t> all(li.rows * 66);
    ASSERT_TRUE(r->ReadRows(l, 0, li.rows, all.data()).ok());
    uint8_t want[66];
    for (uint64_t row = 0; row < li.rows; ++row) {
      GenerateRow(7, l, row, 64, 32, want);
      ASSERT_TRUE(std::equal(want, want + 66, all.data() + row * 66))
          << "layer " << l << " row " << row;
      for (int j = 0; j < 64; ++j) ++hist[all[row * 66 + j]];
      for (int b = 0; b < 2; ++b) {
        const uint8_t s = all[row * 66 + 64 + b];
        ASSERT_GE(s, 119);
        ASSERT_LE(s, 123);
        ++hist[s];
      }
    }
    bytes += all.size();
  }
  const int distinct =
      static_cast<int>(std::count_if(hist.begin(), hist.end(), [](uint64_t c) { return c > 0; }));
  const uint64_t most = *std::max_element(hist.begin(), hist.end());
  EXPECT_GE(distinct, 20);
  EXPECT_LT(most, bytes / 5);
  EXPECT_EQ(hist[0x7F] + hist[0xFF], 0u);  // never NaN
}

TEST_F(GenTableTest, Q2KRowsMatchGenerateEncodedRowAndDecodeFinite) {
  std::unique_ptr<TableReader> r = GenVerified(9, "q2k", RowEncoding::kQ2_K, 256);
  ASSERT_NE(r, nullptr);
  const TableManifest& man = r->manifest();
  ASSERT_EQ(man.layers.size(), 2u);
  for (int l = 0; l < 2; ++l) {
    const LayerInfo& li = man.layers[l];
    EXPECT_EQ(li.encoding, RowEncoding::kQ2_K);
    EXPECT_EQ(li.row_bytes, 84);
    EXPECT_EQ(li.scale_block, 0);
    std::vector<uint8_t> all(li.rows * 84);
    ASSERT_TRUE(r->ReadRows(l, 0, li.rows, all.data()).ok());
    uint8_t want[84];
    for (uint64_t row = 0; row < li.rows; ++row) {
      GenerateEncodedRow(RowEncoding::kQ2_K, 9, l, row, 256, 0, want);
      ASSERT_TRUE(std::equal(want, want + 84, all.data() + row * 84))
          << "layer " << l << " row " << row;
    }
    std::vector<float> values(li.rows * 256);
    DecodeRows(RowEncoding::kQ2_K, all.data(), li.rows, 256, 0, values.data());
    EXPECT_TRUE(
        std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); }));
    EXPECT_TRUE(std::any_of(values.begin(), values.end(), [](float v) { return v != 0; }));
  }
}

TEST_F(GenTableTest, AnEncodingTheGeometryCannotHoldIsRefused) {
  // The small preset's 64 values per row are a quarter of a Q2_K block.
  auto m = Gen(1, "q2k_small", RowEncoding::kQ2_K);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
  EXPECT_NE(m.status().message().find("q2_k"), std::string::npos) << m.status();
}

TEST_F(GenTableTest, SeedDeterminesChecksums) {
  auto a = Gen(1, "s1");
  auto b = Gen(1, "s1b");
  auto c = Gen(2, "s2");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (int l = 0; l < 2; ++l) {
    EXPECT_EQ(a->layers[l].checksum, b->layers[l].checksum);
    EXPECT_NE(a->layers[l].checksum, c->layers[l].checksum);
  }
  EXPECT_EQ(a->ToJson(), b->ToJson());
}

TEST(GenerateRow, ValuesLookGaussian) {
  constexpr int kRows = 4096;
  std::vector<uint8_t> rows(kRows * 264);
  GenerateRows(3, 1, 0, kRows, 256, 32, rows.data());
  std::vector<float> v(kRows * 256);
  fp8::DequantizeRows(rows.data(), kRows, 256, 32, v.data());
  // In code units (value / scale) the codes are ~N(0, 112).
  double sum = 0, sum2 = 0;
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < 256; ++j) {
      const double x = fp8::E4m3ToFloat(rows[r * 264 + j]);
      sum += x;
      sum2 += x * x;
    }
  }
  const double n = kRows * 256.0;
  EXPECT_NEAR(sum / n, 0.0, 1.0);
  EXPECT_NEAR(std::sqrt(sum2 / n), 112.0, 3.0);
  // One row regenerated alone equals its place in a batch.
  uint8_t one[264];
  GenerateRow(3, 1, 1234, 256, 32, one);
  EXPECT_TRUE(std::equal(one, one + 264, rows.data() + 1234 * 264));
}

TEST(GenerateRow, Speed) {
  constexpr uint64_t kRows = 1 << 17;  // 33 MiB of v41 rows
  std::vector<uint8_t> buf(16384 * 264);
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t first = 0; first < kRows; first += 16384) {
    GenerateRows(1, 0, first, 16384, 256, 32, buf.data());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double mbps = kRows * 264 / 1e6 / secs;
  std::printf("GenerateRows: %.0f MB/s (v41 rows, one core)\n", mbps);
  RecordProperty("generate_mb_per_s", static_cast<int>(mbps));
  EXPECT_GT(mbps, 20.0);  // loose: debug/sanitizer builds are slower
}

}  // namespace
}  // namespace engram
