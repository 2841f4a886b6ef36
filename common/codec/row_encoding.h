// How a table layer's stored row encodes its head_dim values.
//
// A table is served in the encoding its source file holds: the checkpoint's
// fp8 rows, or the ggml blocks of a GGUF conversion (Q8_0, Q2_K..Q6_K,
// MXFP4) or plain BF16/F16/F32. Shards never look inside a row; workers
// decode rows to f32 or bf16 bit for bit as ggml's reference
// `dequantize_row_*` does (the golden file gguf_dequant.json is the spec),
// and the fp8 rows as common/codec/fp8.h says.
//
// Every function here is pure and thread-safe.
#ifndef ENGRAM_COMMON_CODEC_ROW_ENCODING_H_
#define ENGRAM_COMMON_CODEC_ROW_ENCODING_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace engram {

enum class RowEncoding : uint8_t {
  // "e4m3_e8m0": head_dim e4m3fn codes, then head_dim / scale_block e8m0
  // scales (common/codec/fp8.h). The official checkpoint's rows.
  kFp8 = 0,
  // ggml block types, a row being head_dim / 32 (Q8_0, MXFP4) or
  // head_dim / 256 (k-quants) consecutive blocks.
  kQ8_0,   // "q8_0":  34-byte blocks of 32 values
  kQ2_K,   // "q2_k":  84-byte blocks of 256
  kQ3_K,   // "q3_k": 110-byte blocks of 256
  kQ4_K,   // "q4_k": 144-byte blocks of 256
  kQ5_K,   // "q5_k": 176-byte blocks of 256
  kQ6_K,   // "q6_k": 210-byte blocks of 256
  kMxfp4,  // "mxfp4": 17-byte blocks of 32
  // Plain little-endian values.
  kBf16,  // "bf16"
  kF16,   // "f16"
  kF32,   // "f32"
};

// The name manifests, shard.json, Info and metrics use: "e4m3_e8m0", "q8_0",
// "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "mxfp4", "bf16", "f16", "f32".
const char* RowEncodingName(RowEncoding e);

// Parses a name of RowEncodingName. InvalidArgument naming the supported
// ones otherwise.
absl::StatusOr<RowEncoding> ParseRowEncoding(std::string_view name);

// "e4m3_e8m0, q8_0, ..., f32", for messages.
std::string SupportedRowEncodings();

// The encoding of a ggml tensor type id as a GGUF tensor info gives it
// (F32 0, F16 1, Q8_0 8, Q2_K 10, Q3_K 11, Q4_K 12, Q5_K 13, Q6_K 14,
// BF16 30, MXFP4 39); nullopt for any other type. kFp8 has no ggml type
// (ds4 files store its rows as I8 bytes).
std::optional<RowEncoding> RowEncodingOfGgmlType(uint32_t ggml_type);
std::optional<uint32_t> GgmlTypeOfRowEncoding(RowEncoding e);

// Values one block encodes (kFp8: scale_block; Q8_0, MXFP4: 32; k-quants:
// 256; plain types: 1) and its bytes (kFp8: scale_block + 1).
int BlockValues(RowEncoding e, int scale_block);
int BlockBytes(RowEncoding e, int scale_block);

// Bytes of one stored row of head_dim values. InvalidArgument (naming the
// encoding and the block size) unless head_dim > 0 is a multiple of the
// encoding's block values (and, for kFp8, scale_block > 0).
absl::StatusOr<int> EncodedRowBytes(RowEncoding e, int head_dim, int scale_block);

// Decodes n_rows consecutive stored rows (each EncodedRowBytes bytes) into
// out[n_rows * head_dim]: f32 values bit for bit as ggml's
// dequantize_row_* (kFp8: fp8::DequantizeRows), or their bf16 bits,
// each f32 rounded to nearest-even. Vectorised for the hot path.
// REQUIRES: EncodedRowBytes(e, head_dim, scale_block).ok().
void DecodeRows(RowEncoding e, const uint8_t* rows, size_t n_rows, int head_dim, int scale_block,
                float* out);
void DecodeRows(RowEncoding e, const uint8_t* rows, size_t n_rows, int head_dim, int scale_block,
                uint16_t* out_bf16);

}  // namespace engram

#endif  // ENGRAM_COMMON_CODEC_ROW_ENCODING_H_
