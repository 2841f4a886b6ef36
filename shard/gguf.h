// GGUF reader for the Engram tables of DeepSeek-V4.1 GGUF files.
//
// GGUF v3, little-endian: "GGUF", u32 version, u64 tensor_count, u64
// metadata_kv_count, the key/value pairs, the tensor infos, padding to
// general.alignment, then the data section (tensor offsets are relative to
// it). Only the header and the Engram tensors' extents are ever read (pread);
// a multi-hundred-GB model file costs a few MB of header parsing.
//
// Architecture `deepseek41` stores each Engram layer L (transformer layer id)
// as tensor blk.L.engram_embd.weight, GGML type I8, dims [264, rows]: per row
// 256 e4m3 bytes then 8 e8m0 scale bytes, i.e. exactly our stored row. The
// hash layout lives in deepseek41.engram.* metadata (see GgufEngramFile).
#ifndef ENGRAM_SHARD_GGUF_H_
#define ENGRAM_SHARD_GGUF_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/layout.h"

namespace engram {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// GGML tensor types this code names in messages (others print as numbers).
inline constexpr uint32_t kGgmlTypeI8 = 24;
// "Q8_0", "Q3_K", ... or "type N".
std::string GgmlTypeName(uint32_t type);

// One metadata value. Integers and bools (scalars and array elements) are
// kept in `ints` as 64-bit patterns (signed types sign-extended); string and
// float arrays are skipped over and only counted, since the Engram code
// never needs them (tokenizer vocabularies are large).
struct GgufValue {
  GgufType type = GgufType::kU8;
  GgufType elem_type = GgufType::kU8;  // arrays only
  uint64_t count = 1;                  // array length; 1 for scalars
  std::vector<uint64_t> ints;
  double real = 0;  // f32/f64 scalar
  std::string str;  // string scalar

  bool is_array() const { return type == GgufType::kArray; }
  // Integer (or bool) scalar or array of them.
  bool is_integer() const;
  bool is_signed() const;  // of the scalar type or the element type
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // dims[0] varies fastest
  uint32_t type = 0;           // GGML type
  uint64_t offset = 0;         // relative to the data section
};

struct GgufHeader {
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_start = 0;  // absolute file offset of the data section
  uint64_t file_size = 0;
  std::map<std::string, GgufValue, std::less<>> metadata;
  std::vector<GgufTensorInfo> tensors;

  const GgufValue* Find(std::string_view key) const;
  const GgufTensorInfo* FindTensor(std::string_view name) const;
};

// Parses the header of the open file `fd` (pread only). Checks the magic,
// version 3 (2 accepted too: same layout), sane lengths (every string
// length and element count against the bytes left in the file before
// anything is allocated; integer arrays at most 2^24 elements, at most
// 2^20 metadata entries and tensors),
// general.alignment (a power of two) and that every tensor offset is
// aligned. Errors start with `what`: DataLoss for a truncated file,
// InvalidArgument otherwise.
absl::StatusOr<GgufHeader> ReadGgufHeader(int fd, const std::string& what);

// The Engram tables of a deepseek41 GGUF file: its hash layout and row
// access. Immutable after Open; ReadRows may be called from many threads.
class GgufEngramFile {
 public:
  static constexpr char kEncoding[] = "e4m3_e8m0_32_row264";
  static constexpr int kRowBytes = 264;
  static constexpr int kHeadDim = 256;
  static constexpr int kScaleBlock = 32;

  // Opens `path` and builds the layout from deepseek41.engram.*:
  //   encoding (must be kEncoding), layer_ids, rows, token_map,
  //   compressed_vocab_size, pad_id, primes (layer-major, order, head),
  //   multipliers (layer-major, max_ngram_size per layer); optional offsets
  //   (default: each layer's exclusive prefix sum of its primes),
  //   max_ngram_size and head_count (default: derived from the array
  //   lengths). Any integer element type is accepted. Checks each layer's
  //   rows are in 1..2^48 and its primes sum to them (without wrapping) and
  //   to its tensor's second dimension, the
  //   tensor's type is I8 with dims [264, rows], and it lies inside the file.
  static absl::StatusOr<std::unique_ptr<GgufEngramFile>> Open(const std::string& path);
  ~GgufEngramFile();
  GgufEngramFile(const GgufEngramFile&) = delete;
  GgufEngramFile& operator=(const GgufEngramFile&) = delete;

  const HashLayout& layout() const { return layout_; }
  const GgufHeader& header() const { return header_; }
  // general.name, or the file name without directory and ".gguf".
  const std::string& name() const { return name_; }
  int n_layers() const { return layout_.n_layers(); }
  uint64_t rows(int layer) const { return layout_.table_rows[layer]; }

  // Copies rows [first, first + n) of layer `layer` (index into the layout)
  // into out[n * kRowBytes]. OutOfRange when outside the layer; DataLoss on a
  // short read.
  absl::Status ReadRows(int layer, uint64_t first, uint64_t n, uint8_t* out) const;

 private:
  GgufEngramFile() = default;
  absl::Status BuildLayout();

  std::string path_;
  int fd_ = -1;
  GgufHeader header_;
  HashLayout layout_;
  std::string name_;
  std::vector<uint64_t> tensor_offsets_;  // absolute, per layer
};

}  // namespace engram

#endif  // ENGRAM_SHARD_GGUF_H_
