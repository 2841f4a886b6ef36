#include "tools/dequant_check_command.h"

#include <bit>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/fp8.h"
#include "common/json_parse.h"
#include "common/row_encoding.h"
#include "common/status_macros.h"

namespace engram {
namespace {

using nlohmann::json;

struct GoldenRow {
  std::vector<uint8_t> bytes;
  std::vector<float> f32;  // each value parsed as double, then rounded to float
};

// One entry of "types", as the file gives it.
struct GoldenType {
  std::string name;
  uint32_t ggml_type = 0;
  int64_t block_values = 0, block_bytes = 0, row_bytes = 0;
  std::vector<GoldenRow> rows;
};

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

absl::StatusOr<GoldenRow> ReadRow(const json& r, const std::string& where) {
  if (!r.is_object() || !r.contains("bytes") || !r["bytes"].is_string() || !r.contains("f32") ||
      !r["f32"].is_array() || r["f32"].empty()) {
    return Malformed(where, "needs \"bytes\" (hex) and \"f32\" (an array of numbers)");
  }
  GoldenRow row;
  if (!ParseHex(r["bytes"].get<std::string>(), &row.bytes)) {
    return Malformed(where, "\"bytes\" is not a string of hex digit pairs");
  }
  for (const json& v : r["f32"]) {
    if (!v.is_number()) return Malformed(where, "\"f32\" holds something other than numbers");
    row.f32.push_back(static_cast<float>(v.get<double>()));
  }
  return row;
}

// Reads `path` as a GGUF dequantisation golden. An error names the path and
// what is wrong.
absl::StatusOr<std::vector<GoldenType>> ReadGolden(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  absl::StatusOr<json> doc = ParseJson(text);
  if (!doc.ok()) return Malformed(path, std::string(doc.status().message()));
  if (!doc->is_object() || !doc->contains("types") || !(*doc)["types"].is_array() ||
      (*doc)["types"].empty()) {
    return Malformed(path,
                     "no \"types\" array: not a GGUF dequantisation golden "
                     "(tests/golden/README.md)");
  }
  std::vector<GoldenType> types;
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
    GoldenType g;
    g.name = t["name"].get<std::string>();
    g.ggml_type = t["ggml_type"].get<uint32_t>();
    g.block_values = t["block_values"].get<int64_t>();
    g.block_bytes = t["block_bytes"].get<int64_t>();
    g.row_bytes = t["row_bytes"].get<int64_t>();
    for (const json& r : t["rows"]) {
      ASSIGN_OR_RETURN(GoldenRow row,
                       ReadRow(r, absl::StrCat(where, ".rows[", g.rows.size(), "]")));
      g.rows.push_back(std::move(row));
    }
    types.push_back(std::move(g));
  }
  return types;
}

std::string Hex32(float f) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", std::bit_cast<uint32_t>(f));
  return buf;
}

std::string Describe(float f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", f);
  return absl::StrCat(buf, " (", Hex32(f), ")");
}

// What differs between the decode of `row` and its expected values, or ""
// when nothing does.
std::string CheckRow(RowEncoding e, const GoldenRow& row) {
  const int head_dim = static_cast<int>(row.f32.size());
  absl::StatusOr<int> row_bytes = EncodedRowBytes(e, head_dim, /*scale_block=*/0);
  if (!row_bytes.ok()) return std::string(row_bytes.status().message());
  if (static_cast<size_t>(*row_bytes) != row.bytes.size()) {
    return absl::StrCat(row.bytes.size(), " bytes for ", head_dim, " values, which take ",
                        *row_bytes);
  }
  std::vector<float> f32(head_dim);
  std::vector<uint16_t> bf16(head_dim);
  DecodeRows(e, row.bytes.data(), 1, head_dim, 0, f32.data());
  DecodeRows(e, row.bytes.data(), 1, head_dim, 0, bf16.data());
  for (int j = 0; j < head_dim; ++j) {
    const float got = f32[j], want = row.f32[j];
    // The files write -0 as 0: zeros match either zero, all else bit for bit.
    if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want) &&
        !(got == 0.0f && want == 0.0f)) {
      return absl::StrCat("value ", j, ": f32 ", Describe(got), ", want ", Describe(want));
    }
    // got is want here, up to the sign of a zero that the file cannot show.
    const uint16_t want_bf16 = fp8::FloatToBf16(got);
    if (bf16[j] != want_bf16) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "value %d: bf16 0x%04x, want 0x%04x", j, bf16[j], want_bf16);
      return buf;
    }
  }
  return "";
}

struct TypeOutcome {
  std::string line;
  int64_t passed = 0, failed = 0;
};

TypeOutcome CheckType(const std::string& path, const GoldenType& g) {
  TypeOutcome out;
  const int64_t n = static_cast<int64_t>(g.rows.size());
  const std::string head = absl::StrCat(path, " ", g.name, ": ");
  // Why every row fails, when the type itself does not match ours.
  std::string refusal;
  const std::optional<RowEncoding> e = RowEncodingOfGgmlType(g.ggml_type);
  if (!e) {
    refusal = absl::StrCat("ggml type ", g.ggml_type, " is not one engram-store decodes");
  } else if (absl::AsciiStrToLower(g.name) != RowEncodingName(*e)) {
    refusal = absl::StrCat("the name disagrees with ggml type ", g.ggml_type, ", which is ",
                           RowEncodingName(*e));
  } else if (g.block_values != BlockValues(*e, 0) || g.block_bytes != BlockBytes(*e, 0)) {
    refusal = absl::StrCat("the file's blocks are ", g.block_values, " values in ", g.block_bytes,
                           " bytes, ours ", BlockValues(*e, 0), " in ", BlockBytes(*e, 0));
  }
  if (!refusal.empty()) {
    out.failed = n;
    out.line = absl::StrCat("FAIL ", head, refusal, "; its ", n, " rows count as failed");
    return out;
  }
  std::string first;
  for (int64_t r = 0; r < n; ++r) {
    const GoldenRow& row = g.rows[r];
    std::string why = static_cast<int64_t>(row.bytes.size()) != g.row_bytes
                          ? absl::StrCat(row.bytes.size(), " bytes, row_bytes says ", g.row_bytes)
                          : CheckRow(*e, row);
    if (why.empty()) {
      ++out.passed;
    } else {
      if (out.failed++ == 0) first = absl::StrCat("row ", r, ": ", why);
    }
  }
  if (out.failed == 0) {
    out.line = absl::StrCat("ok   ", head, n, " rows of ", g.rows[0].f32.size(),
                            " values, f32 and bf16 bit-exact");
  } else {
    out.line = absl::StrCat("FAIL ", head, out.failed, " of ", n, " rows differ; first: ", first);
  }
  return out;
}

}  // namespace

int DequantCheckCommand(const std::vector<std::string>& files) {
  if (files.empty()) {
    std::fprintf(stderr,
                 "engramctl: dequant-check needs at least one golden file, e.g. "
                 "engramctl dequant-check tests/golden/gguf_dequant.json\n");
    return 2;
  }
  std::vector<std::vector<GoldenType>> goldens;
  for (const std::string& f : files) {
    absl::StatusOr<std::vector<GoldenType>> g = ReadGolden(f);
    if (!g.ok()) {
      std::fprintf(stderr, "engramctl: dequant-check: %s\n",
                   std::string(g.status().message()).c_str());
      return 2;
    }
    goldens.push_back(*std::move(g));
  }
  int64_t passed = 0, failed = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    for (const GoldenType& g : goldens[i]) {
      const TypeOutcome t = CheckType(files[i], g);
      std::printf("%s\n", t.line.c_str());
      passed += t.passed;
      failed += t.failed;
    }
  }
  std::printf("%lld passed, %lld failed\n", static_cast<long long>(passed),
              static_cast<long long>(failed));
  return failed == 0 ? 0 : 1;
}

}  // namespace engram
