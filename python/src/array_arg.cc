#include "python/src/array_arg.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace py = pybind11;

namespace engram::python {
namespace {

DType FromBufferFormat(std::string_view f, Py_ssize_t itemsize) {
  while (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@' || f[0] == '|')) {
    f.remove_prefix(1);
  }
  if (f.size() != 1) return DType::kOther;
  switch (f[0]) {
    case 'q':
    case 'l':
      return itemsize == 8 ? DType::kInt64 : DType::kOther;
    case 'B':
      return DType::kUint8;
    case '?':
      return DType::kBool;
    case 'H':
      return DType::kUint16;
    case 'f':
      return DType::kFloat32;
  }
  return DType::kOther;
}

DType FromTorchDtype(std::string_view d) {
  if (d == "torch.int64") return DType::kInt64;
  if (d == "torch.uint8") return DType::kUint8;
  if (d == "torch.bool") return DType::kBool;
  if (d == "torch.bfloat16") return DType::kBf16;
  if (d == "torch.float32") return DType::kFloat32;
  return DType::kOther;
}

size_t ItemSize(DType d) {
  switch (d) {
    case DType::kInt64:
      return 8;
    case DType::kUint16:
    case DType::kBf16:
      return 2;
    case DType::kFloat32:
      return 4;
    default:
      return 1;
  }
}

bool IsTorchTensor(py::handle obj) {
  py::handle type = reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()));
  if (!py::hasattr(type, "__module__")) return false;
  const std::string module = py::str(type.attr("__module__"));
  return module.rfind("torch", 0) == 0 && py::hasattr(obj, "data_ptr");
}

}  // namespace

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kInt64:
      return "int64";
    case DType::kUint8:
      return "uint8";
    case DType::kBool:
      return "bool";
    case DType::kUint16:
      return "uint16";
    case DType::kBf16:
      return "bfloat16";
    case DType::kFloat32:
      return "float32";
    case DType::kOther:
      break;
  }
  return "another dtype";
}

ArrayArg::ArrayArg(py::handle obj, const char* name, bool writable)
    : name_(name), obj_(py::reinterpret_borrow<py::object>(obj)) {
  if (PyObject_CheckBuffer(obj.ptr())) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_STRIDED_RO | PyBUF_FORMAT) != 0) {
      throw py::error_already_set();
    }
    has_view_ = true;
    if (writable && view_.readonly) {
      throw py::value_error(absl::StrCat(name, " is read-only; rows are written into it"));
    }
    if (!PyBuffer_IsContiguous(&view_, 'C')) {
      throw py::value_error(absl::StrCat(name, " must be C-contiguous"));
    }
    dtype_ = FromBufferFormat(view_.format != nullptr ? view_.format : "B", view_.itemsize);
    dtype_text_ = view_.format != nullptr ? view_.format : "B";
    for (int i = 0; i < view_.ndim; ++i) shape_.push_back(view_.shape[i]);
    data_ = view_.buf;
    bytes_ = static_cast<size_t>(view_.len);
    return;
  }
  if (!IsTorchTensor(obj)) {
    throw py::type_error(absl::StrCat(name, " must be a numpy array or a torch tensor, not ",
                                      std::string(py::str(py::type::handle_of(obj)))));
  }
  const std::string device = py::str(obj.attr("device").attr("type"));
  if (device != "cpu") {
    throw py::value_error(absl::StrCat(name, " is on device ", device,
                                       "; rows are written by the CPU (use a pinned CPU tensor)"));
  }
  if (!obj.attr("is_contiguous")().cast<bool>()) {
    throw py::value_error(absl::StrCat(name, " must be contiguous"));
  }
  dtype_text_ = py::str(obj.attr("dtype"));
  dtype_ = FromTorchDtype(dtype_text_);
  for (py::handle d : obj.attr("shape")) shape_.push_back(d.cast<int64_t>());
  data_ = reinterpret_cast<void*>(obj.attr("data_ptr")().cast<uintptr_t>());
  bytes_ = static_cast<size_t>(elements()) * ItemSize(dtype_);
}

ArrayArg::~ArrayArg() {
  if (has_view_) PyBuffer_Release(&view_);
}

int64_t ArrayArg::elements() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

std::string ArrayArg::ShapeString() const {
  return absl::StrCat("[", absl::StrJoin(shape_, ", "), "]");
}

void ArrayArg::RequireDtype(std::initializer_list<DType> allowed, const std::string& what) const {
  for (DType d : allowed) {
    if (d == dtype_) return;
  }
  throw py::type_error(absl::StrCat(name_, " must be ", what, ", not ",
                                    dtype_ == DType::kOther ? dtype_text_ : DTypeName(dtype_)));
}

void ArrayArg::RequireShape(const std::vector<int64_t>& want) const {
  if (shape_ != want) {
    throw py::value_error(absl::StrCat(name_, " has shape ", ShapeString(), "; expected [",
                                       absl::StrJoin(want, ", "), "]"));
  }
}

TokenBatchArgs::TokenBatchArgs(py::handle token_ids, py::handle mask)
    : tokens_(token_ids, "token_ids", /*writable=*/false) {
  tokens_.RequireDtype({DType::kInt64}, "int64");
  if (tokens_.shape().size() != 2 || tokens_.shape()[0] < 1 || tokens_.shape()[1] < 1) {
    throw py::value_error(absl::StrCat("token_ids has shape ", tokens_.ShapeString(),
                                       "; expected [B, T], B, T >= 1"));
  }
  batch_ = tokens_.shape()[0];
  tokens_per_row_ = tokens_.shape()[1];
  if (!mask.is_none()) {
    mask_.emplace(mask, "mask", /*writable=*/false);
    mask_->RequireDtype({DType::kUint8, DType::kBool}, "uint8 or bool");
    mask_->RequireShape({batch_, tokens_per_row_});
  }
}

}  // namespace engram::python
