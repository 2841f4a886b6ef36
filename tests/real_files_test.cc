// The published DeepSeek-V4.1 files, end to end, as an operator runs them:
// a fixture of each family (official safetensors checkpoint; llama.cpp,
// fork and ds4 GGUF files, split or not) at small geometry, then real
// processes: `engramctl manifest`, `engramctl import` into 2 shards, two
// `engram-shard` daemons, `engramctl lookup --json`. Every row served must be
// the file's bytes, in the file's encoding, and its values the reference
// decoding of those bytes (common/codec/row_encoding.h, checked against ggml's own
// output by the golden test). Bad sources are refused with one line and
// leave nothing behind.
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/codec/row_encoding.h"
#include "common/format/table.h"
#include "common/testing/test_files.h"
#include "gtest/gtest.h"
#include "service/testing/shard_process.h"
#include "shard/import/testing/checkpoint_writer.h"
#include "shard/import/testing/gguf_writer.h"

namespace engram {
namespace {

struct CliRun {
  int exit_code;
  std::string out;  // stdout
  std::string err;  // stderr
};

CliRun Engramctl(const std::string& args, const std::string& err_file) {
  const std::string cmd = absl::StrCat(ENGRAM_BIN_DIR, "/engramctl ", args, " 2>", err_file);
  CliRun r{-1, "", ""};
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (FILE* e = std::fopen(err_file.c_str(), "r"); e != nullptr) {
    while ((n = std::fread(buf, 1, sizeof(buf), e)) > 0) r.err.append(buf, n);
    std::fclose(e);
  }
  return r;
}

// A source as engramctl takes it ("--gguf PATH"), and what its rows are.
struct Fixture {
  std::string flag;
  std::string path;
  std::vector<RowEncoding> encodings;  // per layer
  // The stored bytes of row `row` of layer index `layer`, as the file holds them.
  std::function<std::string(int layer, uint64_t row)> row;
};

struct Family {
  std::string name;
  std::function<Fixture(const std::string& dir)> write;
};

void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

class RealFilesTest : public ::testing::TestWithParam<Family> {
 protected:
  std::string Err() const { return dir_.Sub("stderr.txt"); }
  testing::TempDir dir_{"real_files_test"};
};

TEST_P(RealFilesTest, ManifestImportServeLookup) {
  const Fixture fx = GetParam().write(dir_.Sub("source"));
  const std::string src = absl::StrCat(fx.flag, " ", fx.path);

  CliRun r = Engramctl(absl::StrCat("manifest ", src, " --out ", dir_.Sub("table")), Err());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("manifest: wrote"), std::string::npos) << r.out;
  absl::StatusOr<TableManifest> m = TableManifest::Load(dir_.Sub("table"));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->layers.size(), fx.encodings.size());
  for (size_t l = 0; l < fx.encodings.size(); ++l) {
    EXPECT_EQ(m->layers[l].encoding, fx.encodings[l]) << "layer " << l;
  }
  EXPECT_TRUE(m->rows_file.empty());
  // Again: the same manifest, nothing changed.
  r = Engramctl(absl::StrCat("manifest ", src, " --out ", dir_.Sub("table")), Err());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("already written"), std::string::npos) << r.out;

  std::vector<std::unique_ptr<testing::ShardProcess>> shards;
  std::vector<std::string> addrs;
  for (int i = 0; i < 2; ++i) {
    const std::string out = dir_.Sub(absl::StrCat("shard", i));
    r = Engramctl(absl::StrCat("import ", src, " --shards 2 --shard-index ", i, " --out ", out),
                  Err());
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    for (RowEncoding e : fx.encodings) {
      EXPECT_NE(r.out.find(RowEncodingName(e)), std::string::npos) << r.out;
    }
    if (fx.flag == "--checkpoint") {
      EXPECT_NE(r.out.find("not served"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("engram.wkv.weight"), std::string::npos) << r.out;
    }
    testing::ShardProcess::Options so;
    so.binary = absl::StrCat(ENGRAM_BIN_DIR, "/engram-shard");
    so.db_dir = out;
    absl::StatusOr<std::unique_ptr<testing::ShardProcess>> p = testing::ShardProcess::Start(so);
    ASSERT_TRUE(p.ok()) << p.status();
    addrs.push_back((*p)->address());
    shards.push_back(*std::move(p));
  }

  r = Engramctl(absl::StrCat("lookup --json --table ", dir_.Sub("table"), " --shards ",
                             absl::StrJoin(addrs, ","), " --tokens \"3 4 5 6 7 8 9 10 11 12\""),
                Err());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json rows = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(rows.is_array()) << r.out.substr(0, 400);
  ASSERT_FALSE(rows.empty());
  size_t checked = 0;
  for (const nlohmann::json& e : rows) {
    const int layer = e["layer"].get<int>();
    const uint64_t row = e["row_id"].get<uint64_t>();
    const std::string want = fx.row(layer, row);
    ASSERT_EQ(absl::HexStringToBytes(e["bytes"].get<std::string>()), want)
        << "layer " << layer << " row " << row;
    EXPECT_EQ(e["encoding"].get<std::string>(), RowEncodingName(fx.encodings[layer]));
    const LayerInfo& info = m->layers[layer];
    std::vector<float> values(static_cast<size_t>(info.head_dim));
    DecodeRows(info.encoding, reinterpret_cast<const uint8_t*>(want.data()), 1, info.head_dim,
               info.scale_block, values.data());
    const nlohmann::json& got = e["values"];
    ASSERT_EQ(got.size(), values.size());
    for (size_t j = 0; j < values.size(); ++j) {
      const float v = got[j].get<float>();
      ASSERT_EQ(std::memcmp(&v, &values[j], sizeof(float)), 0)
          << "layer " << layer << " row " << row << " value " << j << ": " << v << " vs "
          << values[j];
    }
    ++checked;
  }
  EXPECT_EQ(checked, rows.size());
}

// --------------------------------------------------------------- families

Fixture CheckpointFamily(const std::string& dir, const testing::CheckpointFixture& f) {
  EXPECT_TRUE(testing::WriteCheckpoint(dir, f).ok());
  return {"--checkpoint", dir, std::vector<RowEncoding>(f.layer_ids.size(), RowEncoding::kFp8),
          [f](int layer, uint64_t row) { return testing::FixtureFp8Row(f, layer, row); }};
}

// A GGUF family's fixture holding the checkpoint fixture's model.
Family GgufFixture(testing::GgufFamily family, RowEncoding encoding, int splits, int head_dim,
                   bool open_middle_split = false) {
  std::string name = absl::StrCat(std::string(testing::GgufFamilyName(family)), "_",
                                  RowEncodingName(encoding), "_", splits, "_splits");
  for (char& c : name) {
    if (c == '.') c = '_';
  }
  return {name, [=](const std::string& dir) {
            absl::StatusOr<HashLayout> layout = testing::FixtureLayout({});
            EXPECT_TRUE(layout.ok()) << layout.status();
            testing::GgufFamilyOptions o;
            o.family = family;
            o.encoding = encoding;
            o.head_dim = head_dim;
            o.n_splits = splits;
            constexpr uint64_t kSeed = 17;
            std::filesystem::create_directories(dir);
            absl::StatusOr<std::vector<std::string>> paths =
                testing::WriteEngramGgufFamily(dir, *layout, o, kSeed);
            EXPECT_TRUE(paths.ok()) << paths.status();
            const std::string path = paths->at(open_middle_split ? paths->size() / 2 : 0);
            return Fixture{"--gguf", path,
                           std::vector<RowEncoding>(layout->engram_layer_ids.size(), encoding),
                           [=](int layer, uint64_t row) {
                             return testing::FixtureRowBytes(encoding, kSeed, layer, row, head_dim);
                           }};
          }};
}

std::vector<Family> Families() {
  using testing::GgufFamily;
  std::vector<Family> all = {
      GgufFixture(GgufFamily::kLlamaCpp, RowEncoding::kQ8_0, 1, 256),
      GgufFixture(GgufFamily::kLlamaCpp, RowEncoding::kQ3_K, 3, 256, /*open_middle_split=*/true),
      GgufFixture(GgufFamily::kLlamaCpp, RowEncoding::kQ2_K, 2, 256),
      GgufFixture(GgufFamily::kLlamaCpp, RowEncoding::kQ4_K, 1, 256),
      GgufFixture(GgufFamily::kLlamaCpp, RowEncoding::kQ5_K, 1, 256),
      GgufFixture(GgufFamily::kLlamaCpp, RowEncoding::kQ6_K, 1, 256),
      GgufFixture(GgufFamily::kLlamaCpp, RowEncoding::kBf16, 1, 64),
      GgufFixture(GgufFamily::kLlamaCpp, RowEncoding::kF16, 1, 64),
      GgufFixture(GgufFamily::kLlamaCpp, RowEncoding::kF32, 1, 64),
      GgufFixture(GgufFamily::kFork, RowEncoding::kMxfp4, 12, 256, /*open_middle_split=*/true),
      GgufFixture(GgufFamily::kDs4, RowEncoding::kFp8, 1, 256),
      {"checkpoint",
       [](const std::string& dir) { return CheckpointFamily(dir, testing::CheckpointFixture()); }},
      {"checkpoint_single_file",
       [](const std::string& dir) {
         testing::CheckpointFixture f;
         f.single_file = true;
         return CheckpointFamily(dir, f);
       }},
  };
  return all;
}

INSTANTIATE_TEST_SUITE_P(Families, RealFilesTest, ::testing::ValuesIn(Families()),
                         [](const ::testing::TestParamInfo<Family>& i) { return i.param.name; });

// ---------------------------------------------------------------- refusals

class BadSourceTest : public ::testing::Test {
 protected:
  // engramctl import and manifest of `src` both fail with one line holding
  // `want`, and write nothing.
  void ExpectRefused(const std::string& src, const std::string& want) {
    for (const std::string& cmd :
         {absl::StrCat("import ", src, " --shards 2 --shard-index 0 --out ", dir_.Sub("out")),
          absl::StrCat("manifest ", src, " --out ", dir_.Sub("out"))}) {
      const CliRun r = Engramctl(cmd, dir_.Sub("stderr.txt"));
      EXPECT_NE(r.exit_code, 0) << cmd;
      EXPECT_NE(r.err.find(want), std::string::npos) << cmd << "\n" << r.err;
      EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
      EXPECT_FALSE(std::filesystem::exists(dir_.Sub("out"))) << cmd;
    }
  }
  testing::TempDir dir_{"real_files_bad"};
};

TEST_F(BadSourceTest, CheckpointRefusals) {
  struct Case {
    std::string name;
    std::function<void(testing::CheckpointFixture&)> breakage;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"missing_shard", [](auto& f) { f.drop_second_shard = true; },
       "model-00002-of-00002.safetensors"},
      {"token_map_count", [](auto& f) { f.compressed_vocab_delta = 1; },
       "engram_compressed_vocab_size"},
      {"primes_sum", [](auto& f) { f.num_embeddings_delta = 1; }, "engram_num_embeddings"},
      {"weight_dtype", [](auto& f) { f.wrong_weight_dtype = true; }, "has dtype BF16"},
      {"scale_shape", [](auto& f) { f.wrong_scale_shape = true; }, "has shape"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    testing::CheckpointFixture f;
    c.breakage(f);
    const std::string dir = dir_.Sub(c.name);
    ASSERT_TRUE(testing::WriteCheckpoint(dir, f).ok());
    ExpectRefused("--checkpoint " + dir, c.want);
  }
}

TEST_F(BadSourceTest, GgufRefusals) {
  absl::StatusOr<HashLayout> layout = testing::FixtureLayout({});
  ASSERT_TRUE(layout.ok()) << layout.status();
  testing::GgufFamilyOptions o;
  o.encoding = RowEncoding::kQ2_K;
  o.n_splits = 3;
  {
    SCOPED_TRACE("a missing split");
    const std::string dir = dir_.Sub("missing");
    std::filesystem::create_directories(dir);
    absl::StatusOr<std::vector<std::string>> paths =
        testing::WriteEngramGgufFamily(dir, *layout, o, 3);
    ASSERT_TRUE(paths.ok()) << paths.status();
    ASSERT_EQ(paths->size(), 3u);
    std::filesystem::remove(paths->at(1));
    ExpectRefused("--gguf " + paths->at(0),
                  std::filesystem::path(paths->at(1)).filename().string());
  }
  {
    SCOPED_TRACE("an unsupported block type");
    o.n_splits = 1;
    absl::StatusOr<std::vector<testing::GgufWriter>> w = testing::EngramGgufFamily(*layout, o, 3);
    ASSERT_TRUE(w.ok()) << w.status();
    const int t = (*w)[0].tensor_index(
        absl::StrCat("blk.", layout->engram_layer_ids[0], ".engram_embd.weight"));
    ASSERT_GE(t, 0);
    (*w)[0].set_tensor_type(static_cast<size_t>(t), 2);  // Q4_0
    const std::string path = dir_.Sub("q4_0.gguf");
    ASSERT_TRUE(testing::WriteGgufFiles(*w, {path}).ok());
    ExpectRefused("--gguf " + path, "Q4_0");
  }
}

}  // namespace
}  // namespace engram
