// Malformed table manifests: each gets the status its case names
// (docs/reliability.md, "Malformed input").
#include <cstdint>
#include <string>

#include "absl/strings/str_replace.h"
#include "common/table.h"
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
       "row_bytes 66 != head_dim + head_dim / scale_block"},
      {"row_bytes wrong", edit("\"row_bytes\":66", "\"row_bytes\":65"),
       "row_bytes 65 != head_dim + head_dim / scale_block"},
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
