#include "common/gen/dequant_golden.h"

#include <bit>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/util/file_util.h"
#include "common/util/json_parse.h"
#include "common/util/status_macros.h"

namespace engram {
namespace {

using nlohmann::json;

absl::Status Malformed(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// False unless `hex` is pairs of hex digits.
bool ParseHex(const std::string& hex, std::vector<uint8_t>* out) {
  if (hex.size() % 2 != 0) return false;
  out->resize(hex.size() / 2);
  for (size_t i = 0; i < out->size(); ++i) {
    const int hi = HexDigit(hex[2 * i]), lo = HexDigit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

bool IsInteger(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number_integer();
}

absl::StatusOr<DequantGoldenRow> ReadRow(const json& r, const std::string& where) {
  if (!r.is_object() || !r.contains("bytes") || !r["bytes"].is_string() || !r.contains("f32") ||
      !r["f32"].is_array() || r["f32"].empty()) {
    return Malformed(where, "needs \"bytes\" (hex) and \"f32\" (an array of numbers)");
  }
  DequantGoldenRow row;
  if (!ParseHex(r["bytes"].get<std::string>(), &row.bytes)) {
    return Malformed(where, "\"bytes\" is not a string of hex digit pairs");
  }
  for (const json& v : r["f32"]) {
    if (!v.is_number()) return Malformed(where, "\"f32\" holds something other than numbers");
    row.f32.push_back(static_cast<float>(v.get<double>()));
  }
  return row;
}

}  // namespace

absl::StatusOr<std::vector<DequantGoldenType>> ReadDequantGolden(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  absl::StatusOr<json> doc = ParseJson(text);
  if (!doc.ok()) return Malformed(path, std::string(doc.status().message()));
  if (!doc->is_object() || !doc->contains("types") || !(*doc)["types"].is_array() ||
      (*doc)["types"].empty()) {
    return Malformed(path,
                     "no \"types\" array: not a GGUF dequantisation golden "
                     "(tests/golden/README.md)");
  }
  std::vector<DequantGoldenType> types;
  for (const json& t : (*doc)["types"]) {
    const std::string where = absl::StrCat(path, ": types[", types.size(), "]");
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() ||
        !t.contains("ggml_type") || !t["ggml_type"].is_number_unsigned() ||
        !IsInteger(t, "block_values") || !IsInteger(t, "block_bytes") ||
        !IsInteger(t, "row_bytes") || !t.contains("rows") || !t["rows"].is_array() ||
        t["rows"].empty()) {
      return Malformed(where,
                       "needs \"name\", \"ggml_type\", \"block_values\", \"block_bytes\", "
                       "\"row_bytes\" and a non-empty \"rows\"");
    }
    DequantGoldenType g;
    g.name = t["name"].get<std::string>();
    g.ggml_type = t["ggml_type"].get<uint32_t>();
    g.block_values = t["block_values"].get<int64_t>();
    g.block_bytes = t["block_bytes"].get<int64_t>();
    g.row_bytes = t["row_bytes"].get<int64_t>();
    for (const json& r : t["rows"]) {
      ASSIGN_OR_RETURN(DequantGoldenRow row,
                       ReadRow(r, absl::StrCat(where, ".rows[", g.rows.size(), "]")));
      g.rows.push_back(std::move(row));
    }
    types.push_back(std::move(g));
  }
  return types;
}

bool SameAsDequantGolden(float got, float want) {
  return std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want) ||
         (got == 0.0f && want == 0.0f);
}

}  // namespace engram
