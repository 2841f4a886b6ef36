// ArrayArg: an array argument of the engram_store module, seen without a
// copy through the buffer protocol (numpy, memoryview, bytearray) or as a
// CPU torch.Tensor.
//
// Checks happen at construction, before any work: not an array -> TypeError,
// not C-contiguous, read-only when a writable one is wanted, or on another
// device than the CPU -> ValueError. The dtype and shape are the caller's to
// check (RequireDtype, RequireShape).
//
// Ownership: holds a reference to the object and, for a buffer, the export
// itself (numpy refuses to resize an array while it is exported), so `data`
// stays valid for the ArrayArg's life even with the GIL released.
// REQUIRES: constructed and destroyed with the GIL held.
#ifndef ENGRAM_PYTHON_SRC_ARRAY_ARG_H_
#define ENGRAM_PYTHON_SRC_ARRAY_ARG_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace engram::python {

enum class DType { kInt64, kUint8, kBool, kUint16, kBf16, kFloat32, kOther };

// "int64", "bfloat16", ... as messages name them.
const char* DTypeName(DType d);

class ArrayArg {
 public:
  ArrayArg(pybind11::handle obj, const char* name, bool writable);
  ~ArrayArg();
  ArrayArg(const ArrayArg&) = delete;
  ArrayArg& operator=(const ArrayArg&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  int64_t elements() const;
  const std::vector<int64_t>& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  const char* name() const { return name_; }
  // "[2, 3, 24, 64]".
  std::string ShapeString() const;

  // TypeError unless dtype() is one of `allowed` (`what` describes them).
  void RequireDtype(std::initializer_list<DType> allowed, const std::string& what) const;
  // ValueError unless shape() == want.
  void RequireShape(const std::vector<int64_t>& want) const;

 private:
  const char* name_;
  pybind11::object obj_;
  Py_buffer view_{};
  bool has_view_ = false;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::vector<int64_t> shape_;
  DType dtype_ = DType::kOther;
  std::string dtype_text_;
};

// A step's token ids and their optional mask, as hashing and Prefetch take
// them: token_ids int64 [B, T] with B, T >= 1; mask None or uint8/bool
// [B, T] (nonzero = a real token). TypeError or ValueError naming the
// argument otherwise. Same GIL rule as ArrayArg.
class TokenBatchArgs {
 public:
  TokenBatchArgs(pybind11::handle token_ids, pybind11::handle mask);

  int64_t batch() const { return batch_; }
  int64_t tokens_per_row() const { return tokens_per_row_; }
  const int64_t* token_ids() const { return static_cast<const int64_t*>(tokens_.data()); }
  // nullptr when the mask is None.
  const uint8_t* mask() const {
    return mask_.has_value() ? static_cast<const uint8_t*>(mask_->data()) : nullptr;
  }

 private:
  ArrayArg tokens_;
  std::optional<ArrayArg> mask_;
  int64_t batch_ = 0;
  int64_t tokens_per_row_ = 0;
};

}  // namespace engram::python

#endif  // ENGRAM_PYTHON_SRC_ARRAY_ARG_H_
