// Test helper: writes GGUF v3 files, well-formed or deliberately broken, and
// deepseek41 Engram GGUFs for a hash layout with GenerateRow rows.
#ifndef ENGRAM_SHARD_TESTING_GGUF_WRITER_H_
#define ENGRAM_SHARD_TESTING_GGUF_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/layout.h"
#include "shard/gguf.h"

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
  // Records tensor `i` with another GGML type (its data unchanged).
  void set_tensor_type(size_t i, uint32_t ggml_type);

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

}  // namespace engram::testing

#endif  // ENGRAM_SHARD_TESTING_GGUF_WRITER_H_
