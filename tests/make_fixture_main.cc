// engram-test-fixture: writes a small fixture of one published DeepSeek-V4.1
// file family (shard/testing/) for tests in other languages, with the rows
// it holds laid out for comparison.
//
//   engram-test-fixture --family checkpoint|llama.cpp|fork|ds4
//       [--encoding q2_k] [--splits N] [--head-dim D] [--engram-vocab-size V]
//       [--expected=false] --out DIR
//
// Writes DIR/source/ (the files), DIR/expected/layerL.raw (every stored row
// of layer index L, in row order, as the file holds them) and
// DIR/expected/layerL.f32 (their values decoded by DecodeRows, little-endian
// floats), and prints one line: the engramctl source flag and path, e.g.
// "--gguf DIR/source/engram-fixture-00001-of-00003.gguf". Exit 2 with one
// line on bad flags.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/codec/row_encoding.h"
#include "common/util/file_util.h"
#include "common/util/flags.h"
#include "shard/import/testing/checkpoint_writer.h"
#include "shard/import/testing/gguf_writer.h"

ABSL_FLAG(std::string, family, "checkpoint", "checkpoint, llama.cpp, fork or ds4");
ABSL_FLAG(std::string, encoding, "q8_0", "the GGUF families' row encoding");
ABSL_FLAG(int32_t, splits, 1, "GGUF files of the set");
ABSL_FLAG(int32_t, head_dim, 256, "values per row");
ABSL_FLAG(int64_t, engram_vocab_size, 50,
          "the prime walk's base: each layer has about 2 x this many rows per (order, head)");
ABSL_FLAG(bool, expected, true, "write expected/ (off for large fixtures)");
ABSL_FLAG(std::string, out, "", "the directory to write");

namespace engram {
namespace {

int Fail(const std::string& line) {
  std::fprintf(stderr, "engram-test-fixture: %s\n", line.c_str());
  return 2;
}

int Main() {
  const std::string out = absl::GetFlag(FLAGS_out);
  const std::string family = absl::GetFlag(FLAGS_family);
  if (out.empty()) return Fail("--out DIR is required");
  const std::string src = out + "/source";
  std::filesystem::create_directories(out + "/expected");
  std::filesystem::create_directories(src);
  testing::CheckpointFixture ckpt;
  ckpt.engram_vocab_size = absl::GetFlag(FLAGS_engram_vocab_size);
  if (family == "checkpoint") ckpt.head_dim = absl::GetFlag(FLAGS_head_dim);
  absl::StatusOr<HashLayout> layout = testing::FixtureLayout(ckpt);
  if (!layout.ok()) return Fail(std::string(layout.status().message()));
  std::vector<uint64_t> rows;
  for (int64_t r : layout->table_rows) rows.push_back(static_cast<uint64_t>(r));

  std::string flag, path;
  RowEncoding encoding = RowEncoding::kFp8;
  int head_dim = ckpt.head_dim, scale_block = ckpt.scale_block;
  std::function<std::string(int, uint64_t)> row;
  constexpr uint64_t kSeed = 29;
  if (family == "checkpoint") {
    if (absl::Status s = testing::WriteCheckpoint(src, ckpt); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    flag = "--checkpoint";
    path = src;
    row = [&](int l, uint64_t r) { return testing::FixtureFp8Row(ckpt, l, r); };
  } else {
    testing::GgufFamilyOptions o;
    if (family == "llama.cpp") {
      o.family = testing::GgufFamily::kLlamaCpp;
    } else if (family == "fork") {
      o.family = testing::GgufFamily::kFork;
    } else if (family == "ds4") {
      o.family = testing::GgufFamily::kDs4;
    } else {
      return Fail(absl::StrCat("--family ", family, ": want checkpoint, llama.cpp, fork or ds4"));
    }
    absl::StatusOr<RowEncoding> e = family == "ds4"
                                        ? absl::StatusOr<RowEncoding>(RowEncoding::kFp8)
                                        : ParseRowEncoding(absl::GetFlag(FLAGS_encoding));
    if (!e.ok()) return Fail(std::string(e.status().message()));
    o.encoding = encoding = *e;
    o.head_dim = head_dim = absl::GetFlag(FLAGS_head_dim);
    scale_block = encoding == RowEncoding::kFp8 ? 32 : 0;
    o.n_splits = absl::GetFlag(FLAGS_splits);
    absl::StatusOr<std::vector<std::string>> paths =
        testing::WriteEngramGgufFamily(src, *layout, o, kSeed);
    if (!paths.ok()) return Fail(std::string(paths.status().message()));
    flag = "--gguf";
    path = paths->front();
    row = [&](int l, uint64_t r) {
      return testing::FixtureRowBytes(encoding, kSeed, l, r, head_dim);
    };
  }
  for (size_t l = 0; absl::GetFlag(FLAGS_expected) && l < rows.size(); ++l) {
    std::string raw;
    for (uint64_t r = 0; r < rows[l]; ++r) raw += row(static_cast<int>(l), r);
    std::vector<float> values(rows[l] * static_cast<size_t>(head_dim));
    DecodeRows(encoding, reinterpret_cast<const uint8_t*>(raw.data()), rows[l], head_dim,
               scale_block, values.data());
    const std::string base = absl::StrCat(out, "/expected/layer", l);
    absl::Status s = WriteFileAtomically(base + ".raw", raw);
    if (s.ok()) {
      s = WriteFileAtomically(
          base + ".f32",
          std::string_view(reinterpret_cast<const char*>(values.data()), values.size() * 4));
    }
    if (!s.ok()) return Fail(std::string(s.message()));
  }
  std::printf("%s %s\n", flag.c_str(), path.c_str());
  return 0;
}

}  // namespace
}  // namespace engram

int main(int argc, char** argv) {
  engram::ParseFlags(argc, argv);
  return engram::Main();
}
