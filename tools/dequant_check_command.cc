#include "tools/dequant_check_command.h"

#include <bit>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/codec/fp8.h"
#include "common/codec/row_encoding.h"
#include "common/gen/dequant_golden.h"

namespace engram {
namespace {

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
std::string CheckRow(RowEncoding e, const DequantGoldenRow& row) {
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
    if (!SameAsDequantGolden(got, want)) {
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

TypeOutcome CheckType(const std::string& path, const DequantGoldenType& g) {
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
    const DequantGoldenRow& row = g.rows[r];
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
  std::vector<std::vector<DequantGoldenType>> goldens;
  for (const std::string& f : files) {
    absl::StatusOr<std::vector<DequantGoldenType>> g = ReadDequantGolden(f);
    if (!g.ok()) {
      std::fprintf(stderr, "engramctl: dequant-check: %s\n",
                   std::string(g.status().message()).c_str());
      return 2;
    }
    goldens.push_back(*std::move(g));
  }
  int64_t passed = 0, failed = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    for (const DequantGoldenType& g : goldens[i]) {
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
