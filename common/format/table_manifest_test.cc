// Malformed table manifests: each gets the status its case names
// (docs/reliability.md, "Malformed input").
#include <cstdint>
#include <string>

#include "absl/strings/str_replace.h"
#include "common/format/table.h"
#include "common/testing/test_files.h"
#include "gtest/gtest.h"

namespace engram {
namespace {

// One layer of 17 rows (primes 2, 3, 5, 7), 64 + 2 bytes a row, checksummed.
TableManifest Tiny() {
  const HashLayout l = testing::TinyHashLayout();
  absl::StatusOr<TableManifest> m = TableManifest::ForLayout("t", 1, l, 64, 32);
  EXPECT_TRUE(m.ok()) << m.status();
  m->layers[0].checksum = FormatChecksum(42);
  return *m;
}

TEST(ManifestMalformed, EveryCaseGetsItsStatus) {
  const std::string json = Tiny().ToJson();
  ASSERT_TRUE(TableManifest::FromJson(json).ok());
  auto edit = [&](const std::string& from, const std::string& to) {
    EXPECT_NE(json.find(from), std::string::npos) << from;
    return absl::StrReplaceAll(json, {{from, to}});
  };
  const struct {
    const char* what;
    std::string json;
    const char* message;
  } cases[] = {
      {"not JSON", "{\"format\":", "table manifest: not valid JSON"},
      {"nested 100,000 deep", std::string(100000, '[') + std::string(100000, ']'),
       "JSON nested deeper than 64 levels"},
      {"a JSON string", "\"manifest\"", "not a JSON object"},
      {"another format", edit("\"engram-table\"", "\"engram-tablet\""),
       "format \"engram-tablet\" version 1 unsupported"},
      {"format_version 2^64",
       edit("\"format_version\": 1", "\"format_version\": 18446744073709551616"),
       "member \"format_version\" must be an integer in range"},
      {"rows_file leaves the table", edit("\"rows.safetensors\"", "\"../rows.safetensors\""),
       "rows_file \"../rows.safetensors\" must be a relative path inside the table"},
      {"layers an object",
       absl::StrReplaceAll(json,
                           {{"\"layers\": [", "\"layers\": {\"x\": ["}, {"\n  ],\n", "]},\n"}}),
       "missing array member \"layers\""},
      {"head_dim not an int", edit("\"head_dim\":64", "\"head_dim\":6.4"),
       "layers[0]: member \"head_dim\" must be an integer in range"},
      {"head_dim over 2^31", edit("\"head_dim\":64", "\"head_dim\":2147483648"),
       "layers[0]: member \"head_dim\" must be an integer in range"},
      // head_dim + head_dim / scale_block was an int overflow.
      {"head_dim INT_MAX, scale_block 1",
       absl::StrReplaceAll(json, {{"\"head_dim\":64", "\"head_dim\":2147483647"},
                                  {"\"scale_block\":32", "\"scale_block\":1"}}),
       "makes rows of more than 2^31 bytes"},
      {"row_bytes wrong", edit("\"row_bytes\":66", "\"row_bytes\":65"),
       "row_bytes 65 != 66 (e4m3_e8m0, head_dim 64)"},
      {"unknown encoding", edit("\"encoding\":\"e4m3_e8m0\"", "\"encoding\":\"q4_0\""), "q4_0"},
      {"q8_0 rows of the wrong size",
       absl::StrReplaceAll(json, {{"\"encoding\":\"e4m3_e8m0\"", "\"encoding\":\"q8_0\""},
                                  {"\"scale_block\":32,", ""}}),
       "row_bytes 66 != 68 (q8_0, head_dim 64)"},
      {"rows disagree with the layout", edit("\"rows\":17", "\"rows\":18"),
       "rows 18 != layout.table_rows[0] 17"},
      {"checksum malformed", edit(FormatChecksum(42), "xxh3_64:XYZ"),
       "checksum \"xxh3_64:XYZ\" is not \"xxh3_64:<16 hex>\""},
      {"unsupported dtypes", edit("\"F8_E4M3\"", "\"BF16\""), "dtypes BF16/F8_E8M0 unsupported"},
      {"layout missing", edit(",\n  \"layout\": ", ",\n  \"layout_\": "),
       "missing member \"layout\""},
  };
  for (const auto& c : cases) {
    const absl::StatusOr<TableManifest> m = TableManifest::FromJson(c.json);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument)
        << c.what << ": " << m.status();
    EXPECT_NE(m.status().message().find(c.message), std::string::npos)
        << c.what << ": " << m.status();
  }
}

// A manifest-only table (engramctl manifest) of a Q8_0 GGUF: no rows file,
// the source named, each layer's encoding kept through a round trip; a
// manifest written before encodings existed reads as e4m3_e8m0.
TEST(Manifest, EncodingsAndManifestOnlyRoundTrip) {
  TableManifest m = Tiny();
  m.rows_file.clear();
  m.source_kind = "gguf";
  m.source_path = "/models/x-00001-of-00002.gguf";
  LayerInfo& l = m.layers[0];
  l.encoding = RowEncoding::kQ8_0;
  l.scale_block = 0;
  l.row_bytes = 68;  // two 34-byte blocks of 32 values
  l.weight_tensor = "blk.1.engram_embd.weight";
  l.scale_tensor.clear();
  ASSERT_TRUE(m.Validate(/*require_checksums=*/true).ok()) << m.Validate(true);
  absl::StatusOr<TableManifest> back = TableManifest::FromJson(m.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), m.ToJson());
  EXPECT_EQ(back->layers[0].encoding, RowEncoding::kQ8_0);
  EXPECT_EQ(back->source_kind, "gguf");
  EXPECT_TRUE(back->rows_file.empty());
  EXPECT_EQ(back->source_checksum(), m.source_checksum());

  const std::string old =
      absl::StrReplaceAll(Tiny().ToJson(), {{"\"encoding\":\"e4m3_e8m0\",", ""}});
  ASSERT_EQ(old.find("encoding"), std::string::npos);
  absl::StatusOr<TableManifest> legacy = TableManifest::FromJson(old);
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_EQ(legacy->layers[0].encoding, RowEncoding::kFp8);
}

TEST(ManifestMalformed, RowsThatSumPast64Bits) {
  // Three layers of INT64_MAX rows each: the layout is valid, total_rows()
  // would wrap.
  TableManifest m = Tiny();
  HashLayout& l = m.layout;
  for (int i = 1; i < 3; ++i) {
    l.engram_layer_ids.push_back(i + 1);
    l.multipliers.push_back(l.multipliers[0]);
    l.primes.push_back(l.primes[0]);
    l.offsets.push_back(l.offsets[0]);
    l.table_rows.push_back(l.table_rows[0]);
    LayerInfo layer = m.layers[0];
    layer.index = i;
    layer.layer_id = i + 1;
    layer.weight_tensor += std::to_string(i);
    layer.scale_tensor += std::to_string(i);
    m.layers.push_back(layer);
  }
  for (int i = 0; i < 3; ++i) {
    l.table_rows[i] = INT64_MAX;
    m.layers[i].rows = INT64_MAX;
  }
  ASSERT_TRUE(l.Validate().ok()) << l.Validate();
  const absl::StatusOr<TableManifest> parsed = TableManifest::FromJson(m.ToJson());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
  EXPECT_NE(parsed.status().message().find("layers[2] (layer_id 3): the layers hold more than "
                                           "2^64 rows in total"),
            std::string::npos)
      << parsed.status();
}

}  // namespace
}  // namespace engram
