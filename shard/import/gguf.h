// GGUF reader for the Engram tables of DeepSeek-V4.1 GGUF files.
//
// GGUF v3, little-endian: "GGUF", u32 version, u64 tensor_count, u64
// metadata_kv_count, the key/value pairs, the tensor infos, padding to
// general.alignment, then the data section (tensor offsets are relative to
// it). Only the headers and the Engram tensors' extents are ever read
// (pread); a multi-hundred-GB model costs a few MB of header parsing.
//
// Architecture `deepseek41` stores each Engram layer L (transformer layer id)
// as tensor blk.L.engram_embd.weight, one row per table row, and the hash
// layout in deepseek41.engram.* metadata. Three families of files are
// published (see GgufEngramFile::family()); all are served exactly as
// stored, never re-encoded. A model may be split by llama.cpp's gguf-split
// into NAME-00001-of-0000N.gguf ... files (see GgufEngramFile::Open).
#ifndef ENGRAM_SHARD_IMPORT_GGUF_H_
#define ENGRAM_SHARD_IMPORT_GGUF_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/codec/row_encoding.h"
#include "common/hash/layout.h"

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

// Bytes of one value of a scalar GGUF type (little-endian on disk); 0 for
// strings, arrays and unknown types.
uint64_t GgufScalarBytes(GgufType t);

// GGML tensor types this code names in messages (others print as numbers).
inline constexpr uint32_t kGgmlTypeI8 = 24;
inline constexpr uint32_t kGgmlTypeMxfp4 = 39;
// "Q8_0", "Q3_K", "BF16", "MXFP4", ... or "type N".
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

// The Engram tables of a deepseek41 GGUF model (one file or a split set):
// its hash layout and row access. Immutable after Open; every accessor and
// ReadRows may be called from many threads. Owns its file descriptors.
//
// Metadata keys (all under deepseek41.engram., read from the first split
// only). Integer scalars and arrays may have any integer element type; a key
// with two spellings may use either, and when both are present they must
// agree. Required: layer_ids, token_map (entries >= 0), primes (layer-major,
// order, head), multipliers (layer-major, max_ngram_size per layer),
// pad_id/pad_token_id, and (except ds4) key_length/head_dim, the values per
// row. Optional, else derived: rows/num_embeddings (each layer's primes
// sum; when given it must equal that sum), offsets (each layer's exclusive
// prefix sums of its primes), compressed_vocab_size (1 + max(token_map);
// when given every token_map entry must be below it), max_ngram_size and
// head_count/n_heads (from the array lengths).
//
// Families, as family() names them and Open recognises them:
//   "ds4"       deepseek41.engram.encoding is present; it must be kEncoding.
//               Tables are GGML I8 [264, rows]: raw fp8 rows (RowEncoding
//               kFp8, head_dim 256, scale_block 32).
//   "fork"      no encoding key, but a fork spelling is present (n_heads,
//               head_dim, pad_token_id or num_embeddings). Tables are ggml
//               blocks (MXFP4 as published), usually in 12 splits.
//   "llama.cpp" neither: the llama.cpp converter's keys (head_count,
//               key_length, pad_id, ...; no rows, encoding or
//               compressed_vocab_size).
// In the last two, table dims are [head_dim, rows] (dims[0] = values per
// row) and the GGML type gives the encoding (RowEncodingOfGgmlType: Q8_0,
// Q2_K..Q6_K, MXFP4, BF16, F16, F32); each layer may have its own.
class GgufEngramFile {
 public:
  // The ds4 family's encoding key and row geometry. Other families' rows
  // are row_bytes(layer) long: size buffers by that, not by kRowBytes.
  static constexpr char kEncoding[] = "e4m3_e8m0_32_row264";
  static constexpr int kRowBytes = 264;
  static constexpr int kHeadDim = 256;
  static constexpr int kScaleBlock = 32;

  // Opens `path`, a single GGUF file or ANY split of a set: a name
  // PREFIX-%05d-of-%05d.gguf (1-based, as llama.cpp's llama_split_path
  // writes it) makes Open find PREFIX-00001-of-N.gguf ... beside it, open
  // them all and check each one's split.count is N and its split.no is its
  // 0-based position (as gguf-split writes them and llama-model-loader
  // checks them), and split.tensors.count, when present, is the number of
  // tensors the splits hold. Each table is read from whichever split holds
  // its tensor info. A single file whose header has split keys (other than
  // split.count 1, split.no 0), or a split name whose header has none, is
  // refused. Checks each layer's rows are in 1..2^48 and its primes sum to
  // them (without wrapping) and to its tensor's second dimension, the
  // tensor's type and first dimension suit its family, and it lies inside
  // its split. Errors are one line naming the problem: NotFound for a
  // missing file or split, DataLoss for a truncated one ("truncated"),
  // InvalidArgument otherwise.
  static absl::StatusOr<std::unique_ptr<GgufEngramFile>> Open(const std::string& path);
  ~GgufEngramFile();
  GgufEngramFile(const GgufEngramFile&) = delete;
  GgufEngramFile& operator=(const GgufEngramFile&) = delete;

  const HashLayout& layout() const { return layout_; }
  // The first split's header (the one holding the metadata); header(s) is
  // split s's. REQUIRES: 0 <= s < files().size().
  const GgufHeader& header() const { return headers_[0]; }
  const GgufHeader& header(int split) const { return headers_[split]; }
  // Every file of the model in split order (one for an unsplit file), each
  // spelled with the directory of the path given to Open.
  const std::vector<std::string>& files() const { return files_; }
  // general.name, or the file name without directory, split suffix and
  // ".gguf".
  const std::string& name() const { return name_; }
  // "llama.cpp", "fork" or "ds4" (see above).
  std::string_view family() const { return family_; }
  int n_layers() const { return layout_.n_layers(); }

  // Per layer (an index into the layout). REQUIRES: 0 <= layer < n_layers().
  uint64_t rows(int layer) const { return layout_.table_rows[layer]; }
  RowEncoding encoding(int layer) const { return layers_[layer].encoding; }
  // Values per row.
  int head_dim(int layer) const { return layers_[layer].head_dim; }
  // kFp8's values per e8m0 scale (32); 0 for the other encodings.
  int scale_block(int layer) const { return layers_[layer].scale_block; }
  // Bytes of one stored row: EncodedRowBytes(encoding, head_dim, scale_block).
  int row_bytes(int layer) const { return layers_[layer].row_bytes; }

  // Copies rows [first, first + n) of layer `layer`, exactly as stored, into
  // out[n * row_bytes(layer)]. OutOfRange when outside the layer (or no such
  // layer); DataLoss on a short read.
  absl::Status ReadRows(int layer, uint64_t first, uint64_t n, uint8_t* out) const;

 private:
  struct Layer {
    RowEncoding encoding = RowEncoding::kFp8;
    int head_dim = 0;
    int scale_block = 0;
    int row_bytes = 0;
    int split = 0;        // index into files_ / fds_
    uint64_t offset = 0;  // absolute, in that split
  };

  GgufEngramFile() = default;
  // Opens files_ and reads their headers, checking the split keys.
  absl::Status OpenSplits(const std::string& path, bool named_split);
  // Builds layout_, layers_, family_ from the metadata (gguf_engram.cc).
  absl::Status BuildLayout();
  // Finds blk.L.engram_embd.weight in whichever split holds it.
  absl::Status FindTable(const std::string& name, int* split, const GgufTensorInfo** info) const;

  std::string path_;  // as given to Open
  std::vector<std::string> files_;
  std::vector<int> fds_;
  std::vector<GgufHeader> headers_;
  HashLayout layout_;
  std::vector<Layer> layers_;
  std::string name_;
  std::string_view family_;  // a literal
};

}  // namespace engram

#endif  // ENGRAM_SHARD_IMPORT_GGUF_H_
