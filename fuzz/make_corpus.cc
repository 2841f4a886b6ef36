// engram-fuzz-corpus CORPUS_DIR: writes the seed corpus of every fuzz
// target (normally fuzz/corpus) from the project's own writers and golden
// layouts: a tiny two-layer table (GenerateTable), its manifest, rows file,
// shard map, a hot profile (EncodeHotProfile) and a deepseek41 GGUF
// (testing::EngramGguf), plus hand-made edge cases ("edge-*"). Every file
// is small; the whole corpus stays far below 1 MB. Deterministic.
#include "fuzz/make_corpus.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/format/hot_profile.h"
#include "common/format/safetensors.h"
#include "common/format/shard_map.h"
#include "common/format/table.h"
#include "common/gen/table_gen.h"
#include "common/hash/layout.h"
#include "common/testing/test_files.h"
#include "common/util/file_util.h"
#include "shard/import/testing/gguf_writer.h"

namespace engram::fuzz {

void WriteSeed(const std::string& corpus, const std::string& target, const std::string& name,
               std::string_view bytes) {
  const std::string dir = corpus + "/" + target;
  std::filesystem::create_directories(dir);
  std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "engram-fuzz-corpus: cannot write %s/%s\n", dir.c_str(), name.c_str());
    std::exit(1);
  }
}

namespace {

template <typename T>
T OrDie(absl::StatusOr<T> v) {
  if (!v.ok()) {
    std::fprintf(stderr, "engram-fuzz-corpus: %s\n", v.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(v);
}

void OrDie(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "engram-fuzz-corpus: %s\n", s.ToString().c_str());
    std::exit(1);
  }
}

// A tiny layout: 16 tokens, Engram layers 1 and 5, orders 2..3, 2 heads,
// primes 2, 3, 5, 7 (17 rows a layer), the golden file's multipliers.
HashLayout TinyLayout(const HashLayout& golden) {
  HashLayout l;
  l.vocab_size = 16;
  l.engram_layer_ids = {1, 5};
  l.max_ngram_size = 3;
  l.n_heads = 2;
  l.pad_id = 2;
  for (int64_t t = 0; t < l.vocab_size; ++t) l.token_map.push_back(t % 11);
  for (int layer = 0; layer < 2; ++layer) {
    l.multipliers.emplace_back(golden.multipliers[layer].begin(),
                               golden.multipliers[layer].begin() + 3);
    l.primes.push_back({{2, 3}, {5, 7}});
    l.offsets.push_back({0, 2, 5, 10});
    l.table_rows.push_back(17);
  }
  OrDie(l.Validate());
  return l;
}

// Hash layouts: both golden layouts and the tiny one.
void LayoutSeeds(const std::string& corpus, const HashLayout& tiny) {
  const std::string t = "layout_fuzz";
  for (const char* golden : {"engram_hash_small", "engram_hash_overflow"}) {
    const HashLayout g =
        OrDie(HashLayout::FromFile(std::string(ENGRAM_GOLDEN_DIR "/") + golden + ".json"));
    WriteSeed(corpus, t, std::string("golden-") + golden + ".json", g.ToJson());
  }
  WriteSeed(corpus, t, "tiny.json", tiny.ToJson());
  std::string no_dead = tiny.ToJson();
  no_dead.erase(no_dead.find("\"dead_id\":-1,"), 13);
  WriteSeed(corpus, t, "tiny-no-dead-id.json", no_dead);
  WriteSeed(corpus, t, "edge-deep.json", std::string(80, '[') + std::string(80, ']'));
  std::string bad_slot = tiny.ToJson();
  bad_slot.replace(bad_slot.find("\"table_rows\":[17,17]"), 20, "\"table_rows\":[16,17]");
  WriteSeed(corpus, t, "edge-slot-outside.json", bad_slot);
}

// A table directory of the tiny layout: its manifest and rows file seed
// manifest_fuzz and safetensors_fuzz.
void TableSeeds(const std::string& corpus, const HashLayout& tiny, const HashLayout& golden) {
  testing::TempDir dir("engram-fuzz-corpus");
  const std::string layout_file = dir.Sub("tiny.json");
  OrDie(WriteFileAtomically(layout_file, tiny.ToJson()));
  GenTableOptions o;
  o.out_dir = dir.Sub("table");
  o.preset = "small";
  o.layout_file = layout_file;
  o.table_name = "fuzz-tiny";
  o.seed = 3;
  OrDie(GenerateTable(o, nullptr));
  const std::string manifest = OrDie(ReadFileToString(o.out_dir + "/" + kManifestFile));
  WriteSeed(corpus, "manifest_fuzz", "tiny-manifest.json", manifest);
  WriteSeed(corpus, "safetensors_fuzz", "tiny-rows.safetensors",
            OrDie(ReadFileToString(o.out_dir + "/" + kDefaultRowsFile)));

  TableManifest g = OrDie(TableManifest::ForLayout("golden-small", 7, golden, 256, 32));
  for (LayerInfo& l : g.layers) l.checksum = FormatChecksum(0x0123456789abcdefULL + l.index);
  WriteSeed(corpus, "manifest_fuzz", "golden-manifest.json", g.ToJson());
  // engramctl manifest of a Q2_K GGUF: no rows file, the source named.
  TableManifest q = g;
  q.rows_file.clear();
  q.source_kind = "gguf";
  q.source_path = "/models/V4.1-Q2_K-00001-of-00003.gguf";
  for (LayerInfo& l : q.layers) {
    l.encoding = RowEncoding::kQ2_K;
    l.scale_block = 0;
    l.row_bytes = 84;
    l.weight_tensor = "blk." + std::to_string(l.layer_id) + ".engram_embd.weight";
    l.scale_tensor.clear();
  }
  WriteSeed(corpus, "manifest_fuzz", "manifest-only-q2_k.json", q.ToJson());
  std::string escape = manifest;
  escape.replace(escape.find("\"rows.safetensors\""), 18, "\"../rows.safetensors\"");
  WriteSeed(corpus, "manifest_fuzz", "edge-rows-file-escapes.json", escape);
  std::string wide = manifest;
  wide.replace(wide.find("\"head_dim\":64"), 13, "\"head_dim\":2147483647");
  wide.replace(wide.find("\"scale_block\":32"), 16, "\"scale_block\":1");
  WriteSeed(corpus, "manifest_fuzz", "edge-head-dim-int-max.json", wide);

  // Headers the table writer never makes: metadata, unknown and packed
  // dtypes, an empty tensor.
  const std::vector<SafetensorsTensor> tensors = {
      {"a.weight", "BF16", {2, 3}, 0, 12},
      {"b.bits", "F4", {5}, 12, 15},
      {"c.other", "X9", {7}, 15, 22},
      {"d.empty", "F8_E4M3", {0, 4}, 22, 22},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "fuzz"}};
  std::string st = BuildSafetensorsHeader(tensors, metadata);
  st.append(22, '\x7f');
  WriteSeed(corpus, "safetensors_fuzz", "mixed-dtypes.safetensors", st);
  std::string nested = R"({"__metadata__":{"k":{"a":[1,[2,[3]]]}},)"
                       R"("x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  std::string nested_file(8, '\0');
  nested_file[0] = static_cast<char>(nested.size());
  WriteSeed(corpus, "safetensors_fuzz", "edge-nested-metadata.safetensors",
            nested_file + nested + "xy");
}

// Shard maps of the tiny table, and hot profiles for hot_profile_fuzz's map
// (layer_rows {1000, 37}, 3 shards, read as shard 1).
void ShardSeeds(const std::string& corpus) {
  ShardMap m;
  m.table = "fuzz-tiny";
  m.version = 1;
  m.n_shards = 3;
  m.layer_rows = {17, 17};
  m.row_bytes = {66, 66};
  WriteSeed(corpus, "shard_map_fuzz", "tiny-3-shards.json", m.ToJson());
  m.replicas = {{"10.0.0.1:7070", "10.0.0.2:7070"}, {"h1:7070"}, {"[::1]:7070"}};
  WriteSeed(corpus, "shard_map_fuzz", "tiny-replicas.json", m.ToJson());
  ShardMap one = m;
  one.n_shards = 1;
  one.replicas.clear();
  one.layer_rows = {kMaxShardRowId};
  one.row_bytes = {264};
  WriteSeed(corpus, "shard_map_fuzz", "one-shard-max-rows.json", one.ToJson());
  WriteSeed(corpus, "shard_map_fuzz", "edge-row-bytes-over-32-bits.json",
            R"({"table":"t","version":1,"n_shards":2,"layer_rows":[10],"row_bytes":[4294967362]})");

  std::vector<HotProfileEntry> entries;
  for (uint64_t row = 1; row < 1000; row += 3 * 37) entries.push_back({0, row, 1000 - row});
  for (uint64_t row = 1; row < 37; row += 6) entries.push_back({1, row, row % 4});
  std::sort(entries.begin(), entries.end(), HotProfileOrder);
  const std::string profile = EncodeHotProfile(entries);
  WriteSeed(corpus, "hot_profile_fuzz", "profile.bin", profile);
  WriteSeed(corpus, "hot_profile_fuzz", "empty.bin", EncodeHotProfile({}));
  WriteSeed(corpus, "hot_profile_fuzz", "edge-truncated.bin", profile.substr(0, 16 + 20 * 3 + 7));
  std::string huge_count = profile;
  huge_count.replace(8, 8, std::string(8, '\xff'));
  WriteSeed(corpus, "hot_profile_fuzz", "edge-count-2^64-1.bin", huge_count);
}

// deepseek41 GGUFs of the tiny layout (EngramGguf).
void GgufSeeds(const std::string& corpus, const HashLayout& tiny) {
  const std::string t = "gguf_fuzz";
  const std::string full = testing::EngramGguf(tiny, 5).Build();
  WriteSeed(corpus, t, "tiny.gguf", full);
  testing::GgufWriter w = testing::EngramGguf(tiny, 5, /*alignment=*/64);
  const std::string p = "deepseek41.engram.";
  auto u = [](const auto& v) { return std::vector<uint64_t>(v.begin(), v.end()); };
  std::vector<uint64_t> offsets;
  for (const auto& layer : tiny.offsets) offsets.insert(offsets.end(), layer.begin(), layer.end());
  w.AddIntArray(p + "offsets", GgufType::kI64, u(offsets));
  w.AddScalar(p + "max_ngram_size", GgufType::kU8, 3);
  w.AddScalar(p + "head_count", GgufType::kI32, 2);
  w.AddIntArray(p + "rows", GgufType::kU16, u(tiny.table_rows));
  WriteSeed(corpus, t, "tiny-optional-keys-align-64.gguf", w.Build());
  // The header alone: it parses, the tables then lie past the end.
  const std::string header_only = full.substr(0, full.size() - 2 * 17 * 264 - 64);
  WriteSeed(corpus, t, "edge-header-only.gguf", header_only);
  // The published families (llama.cpp, fork, ds4), whole and as split
  // sets; gguf_split_fuzz takes a set as the first split's length (u32 LE)
  // then both splits.
  const struct {
    testing::GgufFamily family;
    RowEncoding encoding;
    int head_dim;
    const char* name;
  } families[] = {
      {testing::GgufFamily::kLlamaCpp, RowEncoding::kQ8_0, 32, "llama.cpp-q8_0"},
      {testing::GgufFamily::kLlamaCpp, RowEncoding::kQ2_K, 256, "llama.cpp-q2_k"},
      {testing::GgufFamily::kFork, RowEncoding::kMxfp4, 32, "fork-mxfp4"},
      {testing::GgufFamily::kDs4, RowEncoding::kFp8, 256, "ds4"},
  };
  for (const auto& f : families) {
    testing::GgufFamilyOptions o;
    o.family = f.family;
    o.encoding = f.encoding;
    o.head_dim = f.head_dim;
    WriteSeed(corpus, t, std::string(f.name) + ".gguf",
              OrDie(testing::EngramGgufFamily(tiny, o, 5))[0].Build());
    o.n_splits = 2;
    const std::vector<testing::GgufWriter> set = OrDie(testing::EngramGgufFamily(tiny, o, 5));
    const std::string a = set[0].Build(), b = set[1].Build();
    std::string input(4, '\0');
    for (int i = 0; i < 4; ++i) input[i] = static_cast<char>((a.size() >> (8 * i)) & 0xFF);
    WriteSeed(corpus, "gguf_split_fuzz", std::string(f.name) + "-2-splits.bin", input + a + b);
  }
  testing::GgufWriter llama;
  llama.AddString("general.architecture", "llama");
  llama.AddStringArray("tokenizer.ggml.tokens", {"a", "b"});
  llama.AddTensor("token_embd.weight", {2, 2}, 0, std::string(16, '\0'));
  WriteSeed(corpus, t, "edge-llama.gguf", llama.Build());
}

}  // namespace
}  // namespace engram::fuzz

int main(int argc, char** argv) {
  using namespace engram;
  if (argc != 2) {
    std::fprintf(stderr, "usage: engram-fuzz-corpus CORPUS_DIR (normally fuzz/corpus)\n");
    return 2;
  }
  const std::string corpus = argv[1];
  const HashLayout golden =
      fuzz::OrDie(HashLayout::FromFile(ENGRAM_GOLDEN_DIR "/engram_hash_small.json"));
  const HashLayout tiny = fuzz::TinyLayout(golden);
  fuzz::LayoutSeeds(corpus, tiny);
  fuzz::TableSeeds(corpus, tiny, golden);
  fuzz::ShardSeeds(corpus);
  fuzz::GgufSeeds(corpus, tiny);
  fuzz::WriteWireSeeds(corpus);
  fuzz::WriteCheckpointSeeds(corpus);
  std::printf("engram-fuzz-corpus: wrote %s\n", corpus.c_str());
  return 0;
}
