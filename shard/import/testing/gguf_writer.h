// Test helpers: write GGUF v3 files, well-formed or deliberately broken, and
// DeepSeek-V4.1 Engram GGUFs of every published family (shard/import/gguf.h) for a
// hash layout, split or not, whose rows tests can regenerate
// (FixtureRowBytes) to check what a shard serves. Test-only
// (engram_shard_testing).
#ifndef ENGRAM_SHARD_IMPORT_TESTING_GGUF_WRITER_H_
#define ENGRAM_SHARD_IMPORT_TESTING_GGUF_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/codec/row_encoding.h"
#include "common/hash/layout.h"
#include "shard/import/gguf.h"

namespace engram::testing {

// Collects metadata and tensors; Build() lays them out as GGUF v3. Not
// thread-safe.
class GgufWriter {
 public:
  void AddString(const std::string& key, const std::string& value);
  void AddScalar(const std::string& key, GgufType type, uint64_t bits);
  void AddIntArray(const std::string& key, GgufType elem, const std::vector<uint64_t>& values);
  void AddStringArray(const std::string& key, const std::vector<std::string>& values);
  // Removes key if present (the Add* calls replace an existing key).
  void Remove(const std::string& key);

  // Data offsets are assigned in order, aligned to `alignment`.
  void AddTensor(const std::string& name, std::vector<uint64_t> dims, uint32_t ggml_type,
                 std::string data);

  // Alignment used for the data section (write general.alignment yourself
  // if it is not 32).
  void set_alignment(uint64_t a) { alignment_ = a; }
  // Adds `delta` to the recorded offset of tensor `i` (to break alignment).
  void set_offset_skew(size_t i, uint64_t delta);
  // Records tensor `i` with another GGML type / other dims (its data
  // unchanged).
  void set_tensor_type(size_t i, uint32_t ggml_type);
  void set_tensor_dims(size_t i, std::vector<uint64_t> dims);
  // The index of the tensor called `name`, or -1.
  int tensor_index(const std::string& name) const;
  size_t n_tensors() const { return tensors_.size(); }
  // Whether metadata `key` is present.
  bool has(const std::string& key) const;

  std::string Build() const;
  absl::Status Write(const std::string& path) const;

 private:
  struct Kv {
    std::string key;
    std::string encoded;  // type + value bytes
  };
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    std::string data;
    uint64_t skew = 0;
  };
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
  uint64_t alignment_ = 32;
};

// A deepseek41 GGUF holding `layout`'s Engram tables: rows GenerateRow(seed,
// layer, row, 256, 32), metadata as GgufEngramFile expects (u32 arrays,
// multipliers u64, no optional keys), plus a tokenizer string array and an
// unrelated F32 tensor (tensor 0), as real files have; tensor 1 + l is
// layer l's table. Tests then mutate it.
GgufWriter EngramGguf(const HashLayout& layout, uint64_t seed, uint64_t alignment = 32);

// The GGUF families GgufEngramFile reads (GgufEngramFile::family()).
enum class GgufFamily {
  // llama.cpp's converter: deepseek41.engram.{head_count, key_length,
  // max_ngram_size, pad_id} U32, layer_ids and token_map I32 arrays,
  // multipliers, primes and offsets U64 arrays; no rows, encoding or
  // compressed_vocab_size. Tables [head_dim, rows] in a ggml type.
  kLlamaCpp,
  // The MXFP4 fork (published in 12 splits): {n_heads, head_dim} U32,
  // pad_token_id I32, compressed_vocab_size U32, num_embeddings U64 array,
  // layer_ids and token_map I32 arrays, multipliers and primes I64 arrays,
  // no offsets, no max_ngram_size. Tables [head_dim, rows] in a ggml type.
  // (Element types are this fixture's choice; the reader takes any.)
  kFork,
  // DeepSeek's own converter, as EngramGguf writes it: encoding
  // e4m3_e8m0_32_row264, rows, compressed_vocab_size, U32 arrays; tables
  // I8 [264, rows] of GenerateRow fp8 rows.
  kDs4,
};
// "llama.cpp", "fork", "ds4", as GgufEngramFile::family() says.
std::string_view GgufFamilyName(GgufFamily family);

struct GgufFamilyOptions {
  GgufFamily family = GgufFamily::kLlamaCpp;
  // kDs4: kFp8 only. Others: any encoding but kFp8 (kQ8_0 ... kF32).
  RowEncoding encoding = RowEncoding::kQ8_0;
  // Values per row. kDs4: 256 only. Others: a multiple of the encoding's
  // block values (256 fits every encoding; 32 or 64 fit Q8_0, MXFP4 and the
  // plain types, for smaller files).
  int head_dim = 256;
  // 1: one file DIR/NAME.gguf. N > 1: DIR/NAME-00001-of-0000N.gguf ... as
  // llama.cpp's gguf-split writes them: every split has split.no (U16,
  // 0-based), split.count (U16) and split.tensors.count (I32); the first
  // holds all other metadata and companion tensors only, and layer l's table
  // is in split 1 + l % (N - 1); every split holds at least one tensor.
  int n_splits = 1;
  std::string name = "engram-fixture";  // file name prefix and general.name
};

// One GgufWriter per split (the first holding the metadata), for tests
// that break something before writing. Besides the Engram tables each file
// has companion tensors a reader must skip: token_embd.weight (F32),
// blk.L.engram.wkv.weight (F16, per Engram layer) and, in each later split,
// blk.S.ffn_down.weight (F32). InvalidArgument when the options do not fit
// (see GgufFamilyOptions). Table bytes: row r of layout layer l is
// FixtureRowBytes(encoding, seed, l, r, head_dim).
absl::StatusOr<std::vector<GgufWriter>> EngramGgufFamily(const HashLayout& layout,
                                                         const GgufFamilyOptions& options,
                                                         uint64_t seed);

// The paths WriteEngramGgufFamily writes in `dir`, in split order.
std::vector<std::string> GgufFamilyPaths(const std::string& dir, const GgufFamilyOptions& options);

// EngramGgufFamily written to GgufFamilyPaths(dir, options); returns those
// paths. Any of them may be given to GgufEngramFile::Open (or to
// `engramctl import --gguf`). `layout` must be valid (HashLayout::Validate);
// the tables are built in memory (rows x row bytes each), so keep them small:
// TinyHashLayout() (17 rows) or the "small" preset with a small
// engram_vocab_size (~1,500 rows a layer at 60). For an end-to-end test:
//
//   GgufFamilyOptions o;
//   o.family = GgufFamily::kFork;
//   o.encoding = RowEncoding::kMxfp4;
//   o.n_splits = 12;
//   ASSIGN_OR_RETURN(std::vector<std::string> paths,
//                    WriteEngramGgufFamily(dir, layout, o, seed));
//   // import --gguf paths[5] into 2 shards, serve, look up; row r of
//   // layer l must come back as FixtureRowBytes(o.encoding, seed, l, r,
//   // o.head_dim).
absl::StatusOr<std::vector<std::string>> WriteEngramGgufFamily(const std::string& dir,
                                                               const HashLayout& layout,
                                                               const GgufFamilyOptions& options,
                                                               uint64_t seed);

// Writes writers[i] to paths[i]. REQUIRES: equal sizes.
absl::Status WriteGgufFiles(const std::vector<GgufWriter>& writers,
                            const std::vector<std::string>& paths);

// The exact stored bytes (EncodedRowBytes(encoding, head_dim, kFp8 ? 32 : 0)
// of them) of row `row` of layout layer `layer` in a fixture written with
// `seed`: for kFp8 GenerateRow(seed, layer, row, head_dim, 32); otherwise
// pseudo-random bytes of (seed, layer, row, encoding) whose ggml blocks
// decode to finite values (each block's fp16 d/dmin a small normal number,
// MXFP4 scales near 1; BF16/F16/F32 values small normal numbers). Pure and
// thread-safe. REQUIRES: EncodedRowBytes(encoding, head_dim, ...).ok().
std::string FixtureRowBytes(RowEncoding encoding, uint64_t seed, int layer, uint64_t row,
                            int head_dim);

}  // namespace engram::testing

#endif  // ENGRAM_SHARD_IMPORT_TESTING_GGUF_WRITER_H_
