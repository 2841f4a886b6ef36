#include "common/codec/row_encoding.h"

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/codec/fp8.h"
#include "common/codec/ggml_blocks.h"

namespace engram {
namespace {

struct EncodingInfo {
  RowEncoding encoding;
  const char* name;
  std::optional<ggml::Type> ggml_type;  // nullopt for kFp8
};

// In RowEncoding order: kEncodings[e].encoding == e.
constexpr std::array<EncodingInfo, 11> kEncodings = {{
    {RowEncoding::kFp8, "e4m3_e8m0", std::nullopt},
    {RowEncoding::kQ8_0, "q8_0", ggml::Type::kQ8_0},
    {RowEncoding::kQ2_K, "q2_k", ggml::Type::kQ2_K},
    {RowEncoding::kQ3_K, "q3_k", ggml::Type::kQ3_K},
    {RowEncoding::kQ4_K, "q4_k", ggml::Type::kQ4_K},
    {RowEncoding::kQ5_K, "q5_k", ggml::Type::kQ5_K},
    {RowEncoding::kQ6_K, "q6_k", ggml::Type::kQ6_K},
    {RowEncoding::kMxfp4, "mxfp4", ggml::Type::kMxfp4},
    {RowEncoding::kBf16, "bf16", ggml::Type::kBf16},
    {RowEncoding::kF16, "f16", ggml::Type::kF16},
    {RowEncoding::kF32, "f32", ggml::Type::kF32},
}};

constexpr bool EncodingsInOrder() {
  for (size_t i = 0; i < kEncodings.size(); ++i) {
    if (static_cast<size_t>(kEncodings[i].encoding) != i) return false;
  }
  return true;
}
static_assert(EncodingsInOrder());

// The entry of `e`; an out-of-range value (never a valid RowEncoding) maps
// to kFp8's.
const EncodingInfo& Info(RowEncoding e) {
  const size_t i = static_cast<size_t>(e);
  return kEncodings[i < kEncodings.size() ? i : 0];
}

}  // namespace

const char* RowEncodingName(RowEncoding e) { return Info(e).name; }

absl::StatusOr<RowEncoding> ParseRowEncoding(std::string_view name) {
  for (const EncodingInfo& info : kEncodings) {
    if (info.name == name) return info.encoding;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown row encoding \"", std::string(name),
                                                 "\"; supported: ", SupportedRowEncodings()));
}

std::string SupportedRowEncodings() {
  std::string names;
  for (const EncodingInfo& info : kEncodings) {
    if (!names.empty()) names += ", ";
    names += info.name;
  }
  return names;
}

std::optional<RowEncoding> RowEncodingOfGgmlType(uint32_t ggml_type) {
  for (const EncodingInfo& info : kEncodings) {
    if (info.ggml_type && static_cast<uint32_t>(*info.ggml_type) == ggml_type) {
      return info.encoding;
    }
  }
  return std::nullopt;
}

std::optional<uint32_t> GgmlTypeOfRowEncoding(RowEncoding e) {
  const std::optional<ggml::Type> t = Info(e).ggml_type;
  if (!t) return std::nullopt;
  return static_cast<uint32_t>(*t);
}

int BlockValues(RowEncoding e, int scale_block) {
  const std::optional<ggml::Type> t = Info(e).ggml_type;
  return t ? ggml::BlockValues(*t) : scale_block;
}

int BlockBytes(RowEncoding e, int scale_block) {
  const std::optional<ggml::Type> t = Info(e).ggml_type;
  return t ? ggml::BlockBytes(*t) : scale_block + 1;
}

absl::StatusOr<int> EncodedRowBytes(RowEncoding e, int head_dim, int scale_block) {
  if (e == RowEncoding::kFp8 && scale_block <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("row encoding e4m3_e8m0 needs a scale_block > 0, not ", scale_block));
  }
  const int block = BlockValues(e, scale_block);
  if (head_dim <= 0 || head_dim % block != 0) {
    return absl::InvalidArgumentError(absl::StrCat("row encoding ", RowEncodingName(e),
                                                   " stores blocks of ", block,
                                                   " values: head_dim must be a positive "
                                                   "multiple of ",
                                                   block, ", not ", head_dim));
  }
  const int64_t bytes = int64_t{head_dim} / block * BlockBytes(e, scale_block);
  if (bytes > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("row encoding ", RowEncodingName(e),
                                                   ": head_dim ", head_dim,
                                                   " makes rows of more than 2^31 bytes"));
  }
  return static_cast<int>(bytes);
}

void DecodeRows(RowEncoding e, const uint8_t* rows, size_t n_rows, int head_dim, int scale_block,
                float* out) {
  // Rows of whole blocks are contiguous blocks: n_rows rows decode as one
  // run of n_rows * head_dim values.
  const std::optional<ggml::Type> t = Info(e).ggml_type;
  if (!t) return fp8::DequantizeRows(rows, n_rows, head_dim, scale_block, out);
  ggml::DequantizeRow(*t, rows, static_cast<int64_t>(n_rows) * head_dim, out);
}

void DecodeRows(RowEncoding e, const uint8_t* rows, size_t n_rows, int head_dim, int scale_block,
                uint16_t* out_bf16) {
  const std::optional<ggml::Type> t = Info(e).ggml_type;
  if (!t) return fp8::DequantizeRowsBf16(rows, n_rows, head_dim, scale_block, out_bf16);
  ggml::DequantizeRow(*t, rows, static_cast<int64_t>(n_rows) * head_dim, out_bf16);
}

}  // namespace engram
