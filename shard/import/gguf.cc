#include "shard/import/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/status_macros.h"

namespace engram {
namespace {

constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;
// Integer arrays are kept in memory, 8 bytes an element: a token map of a
// few hundred thousand ids is the largest a real file has.
constexpr uint64_t kMaxIntArrayElements = uint64_t{1} << 24;
// Real files have a few dozen metadata entries and a few thousand tensors.
constexpr uint64_t kMaxEntries = uint64_t{1} << 20;
constexpr uint64_t kReadBufferBytes = uint64_t{1} << 20;
constexpr uint32_t kMaxDims = 8;

// Sequential little-endian reads of a file through a buffer (pread only).
class Cursor {
 public:
  Cursor(int fd, uint64_t file_size, const std::string& what)
      : fd_(fd), file_size_(file_size), what_(what) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return file_size_ - pos_; }

  absl::Status Read(void* out, uint64_t n) {
    if (n > remaining()) {
      return absl::DataLossError(absl::StrCat(what_, ": file ends at byte ", file_size_,
                                              " inside the header "
                                              "(reading ",
                                              n, " bytes at ", pos_, "); the file is truncated"));
    }
    auto* dst = static_cast<uint8_t*>(out);
    while (n > 0) {
      if (pos_ < buf_pos_ || pos_ >= buf_pos_ + buf_len_) {
        RETURN_IF_ERROR(Fill());
      }
      const uint64_t avail = buf_pos_ + buf_len_ - pos_;
      const uint64_t take = n < avail ? n : avail;
      std::memcpy(dst, buf_.data() + (pos_ - buf_pos_), take);
      dst += take;
      pos_ += take;
      n -= take;
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status Get(T* out) {
    return Read(out, sizeof(T));  // GGUF is little-endian, as is the host
  }

  absl::Status GetString(std::string* out) {
    uint64_t len = 0;
    RETURN_IF_ERROR(Get(&len));
    if (len > kMaxStringBytes) {
      return absl::InvalidArgumentError(absl::StrCat(what_, ": string of ", len, " bytes at byte ",
                                                     pos_ - 8,
                                                     " is implausible; the header is corrupt"));
    }
    if (len > remaining()) {  // before allocating: the length is the file's word
      return absl::DataLossError(absl::StrCat(what_, ": string of ", len, " bytes at byte ",
                                              pos_ - 8, " runs past the end of the file (",
                                              file_size_, " bytes); the file is truncated"));
    }
    out->resize(len);
    return Read(out->data(), len);
  }

  absl::Status Skip(uint64_t n) {
    if (n > remaining()) return Read(nullptr, n);  // the truncation error
    pos_ += n;
    return absl::OkStatus();
  }

 private:
  absl::Status Fill() {
    // Never more than the file holds: a 100-byte file costs no 1 MiB buffer.
    buf_.resize(std::min(kReadBufferBytes, std::max<uint64_t>(remaining(), 1)));
    const ssize_t got = ::pread(fd_, buf_.data(), buf_.size(), static_cast<off_t>(pos_));
    if (got <= 0) {
      return absl::DataLossError(
          absl::StrCat(what_, ": cannot read at byte ", pos_, ": ", std::strerror(errno)));
    }
    buf_pos_ = pos_;
    buf_len_ = static_cast<uint64_t>(got);
    return absl::OkStatus();
  }

  int fd_;
  uint64_t file_size_;
  std::string what_;
  uint64_t pos_ = 0;
  std::vector<uint8_t> buf_;
  uint64_t buf_pos_ = 0, buf_len_ = 0;
};

bool IsIntegerType(GgufType t) {
  return GgufScalarBytes(t) != 0 && t != GgufType::kF32 && t != GgufType::kF64;
}

bool IsSignedType(GgufType t) {
  return t == GgufType::kI8 || t == GgufType::kI16 || t == GgufType::kI32 || t == GgufType::kI64;
}

// Reads one integer of type t (IsIntegerType) as a 64-bit pattern.
absl::Status GetInt(Cursor& c, GgufType t, uint64_t* out) {
  uint8_t raw[8] = {0};
  const uint64_t n = GgufScalarBytes(t);
  RETURN_IF_ERROR(c.Read(raw, n));
  uint64_t v = 0;
  for (uint64_t i = 0; i < n; ++i) v |= uint64_t{raw[i]} << (8 * i);
  if (IsSignedType(t) && n < 8 && (v >> (8 * n - 1)) != 0) {
    v |= ~uint64_t{0} << (8 * n);  // sign-extend
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ReadValue(Cursor& c, GgufType type, const std::string& key, const std::string& what,
                       GgufValue* out) {
  out->type = type;
  if (IsIntegerType(type)) {
    out->ints.resize(1);
    return GetInt(c, type, &out->ints[0]);
  }
  switch (type) {
    case GgufType::kF32: {
      float f = 0;
      RETURN_IF_ERROR(c.Get(&f));
      out->real = f;
      return absl::OkStatus();
    }
    case GgufType::kF64:
      return c.Get(&out->real);
    case GgufType::kString:
      return c.GetString(&out->str);
    case GgufType::kArray: {
      uint32_t elem = 0;
      RETURN_IF_ERROR(c.Get(&elem));
      RETURN_IF_ERROR(c.Get(&out->count));
      out->elem_type = static_cast<GgufType>(elem);
      const uint64_t width = GgufScalarBytes(out->elem_type);
      // Every element takes at least 8 bytes (a string's length) otherwise.
      const uint64_t min_bytes = width != 0 ? width : 8;
      if (out->elem_type == GgufType::kArray ||
          (width == 0 && out->elem_type != GgufType::kString)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": metadata ", key, " is an array of unsupported type ", elem));
      }
      if (out->count > c.remaining() / min_bytes) {
        return absl::DataLossError(
            absl::StrCat(what, ": metadata ", key, " claims ", out->count,
                         " elements, more than the file holds; the file is truncated or "
                         "corrupt"));
      }
      if (IsIntegerType(out->elem_type)) {
        if (out->count > kMaxIntArrayElements) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, ": metadata ", key, " is an integer array of ", out->count,
              " elements, more than the ", kMaxIntArrayElements, " this reader keeps"));
        }
        out->ints.resize(out->count);
        for (uint64_t i = 0; i < out->count; ++i) {
          RETURN_IF_ERROR(GetInt(c, out->elem_type, &out->ints[i]));
        }
        return absl::OkStatus();
      }
      if (width != 0) return c.Skip(out->count * width);  // float arrays
      std::string skipped;
      for (uint64_t i = 0; i < out->count; ++i) {
        RETURN_IF_ERROR(c.GetString(&skipped));
      }
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": metadata ", key, " has unknown value type ", static_cast<uint32_t>(type)));
  }
}

}  // namespace

uint64_t GgufScalarBytes(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    default:
      return 0;
  }
}

std::string GgmlTypeName(uint32_t type) {
  static constexpr const char* kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  nullptr,  nullptr, "Q5_0",  "Q5_1",
      "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16",  nullptr,
      nullptr,   nullptr,  "TQ1_0",   "TQ2_0", nullptr,  nullptr, nullptr, "MXFP4"};
  if (type < std::size(kNames) && kNames[type] != nullptr) return kNames[type];
  return absl::StrCat("type ", type);
}

bool GgufValue::is_integer() const { return IsIntegerType(is_array() ? elem_type : type); }

bool GgufValue::is_signed() const { return IsSignedType(is_array() ? elem_type : type); }

const GgufValue* GgufHeader::Find(std::string_view key) const {
  auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufHeader::FindTensor(std::string_view name) const {
  for (const GgufTensorInfo& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<GgufHeader> ReadGgufHeader(int fd, const std::string& what) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(absl::StrCat(what, ": cannot stat: ", std::strerror(errno)));
  }
  GgufHeader h;
  h.file_size = static_cast<uint64_t>(st.st_size);
  Cursor c(fd, h.file_size, what);
  char magic[4];
  RETURN_IF_ERROR(c.Read(magic, 4));
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a GGUF file (no \"GGUF\" magic)"));
  }
  RETURN_IF_ERROR(c.Get(&h.version));
  if (h.version != 2 && h.version != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": GGUF version ", h.version, " is not supported (want 3)"));
  }
  uint64_t n_tensors = 0, n_kv = 0;
  RETURN_IF_ERROR(c.Get(&n_tensors));
  RETURN_IF_ERROR(c.Get(&n_kv));
  // Each kv takes >= 12 bytes and each tensor info >= 24.
  if (n_kv > c.remaining() / 12 || n_tensors > c.remaining() / 24) {
    return absl::DataLossError(
        absl::StrCat(what, ": header claims ", n_kv, " metadata entries and ", n_tensors,
                     " tensors, more than the file holds; truncated or corrupt"));
  }
  if (n_kv > kMaxEntries || n_tensors > kMaxEntries) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": header claims ", n_kv, " metadata entries and ", n_tensors,
                     " tensors; more than ", kMaxEntries, " of either is implausible"));
  }
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    uint32_t type = 0;
    RETURN_IF_ERROR(c.GetString(&key));
    RETURN_IF_ERROR(c.Get(&type));
    GgufValue v;
    RETURN_IF_ERROR(ReadValue(c, static_cast<GgufType>(type), key, what, &v));
    h.metadata[key] = std::move(v);
  }
  if (const GgufValue* a = h.Find("general.alignment"); a != nullptr) {
    const uint64_t align = a->is_integer() && !a->is_array() ? a->ints[0] : 0;
    if (align == 0 || (align & (align - 1)) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": general.alignment must be a power of two integer"));
    }
    h.alignment = align;
  }
  // Grown as infos are read, so memory follows the bytes actually parsed.
  h.tensors.reserve(std::min<uint64_t>(n_tensors, 4096));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo& t = h.tensors.emplace_back();
    uint32_t n_dims = 0;
    RETURN_IF_ERROR(c.GetString(&t.name));
    RETURN_IF_ERROR(c.Get(&n_dims));
    if (n_dims > kMaxDims) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": tensor ", t.name, " has ", n_dims, " dimensions"));
    }
    t.dims.resize(n_dims);
    for (uint64_t& d : t.dims) {
      RETURN_IF_ERROR(c.Get(&d));
    }
    RETURN_IF_ERROR(c.Get(&t.type));
    RETURN_IF_ERROR(c.Get(&t.offset));
    if (t.offset % h.alignment != 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": tensor ", t.name, " has offset ",
                                                     t.offset, ", not a multiple of the alignment ",
                                                     h.alignment, "; the file is corrupt"));
    }
  }
  h.data_start = (c.pos() + h.alignment - 1) / h.alignment * h.alignment;
  if (h.data_start > h.file_size) {
    return absl::DataLossError(absl::StrCat(what, ": file ends before its data section (byte ",
                                            h.data_start, "); the file is truncated"));
  }
  return h;
}

GgufEngramFile::~GgufEngramFile() {
  for (int fd : fds_) ::close(fd);
}

namespace {

// Parses a split name PREFIX-%05d-of-%05d.gguf (llama.cpp's llama_split_path
// format in src/llama.cpp: split_no + 1, so 1-based; gguf-split names its
// outputs so). Returns false when `base` is not such a name.
bool ParseSplitName(std::string_view base, std::string* prefix, int* no, int* count) {
  constexpr std::string_view kSuffix = ".gguf";
  constexpr size_t kTail = 1 + 5 + 4 + 5;  // "-00001-of-00012"
  if (!base.ends_with(kSuffix) || base.size() <= kSuffix.size() + kTail) return false;
  const std::string_view tail = base.substr(base.size() - kSuffix.size() - kTail, kTail);
  auto digits = [](std::string_view d, int* out) {
    *out = 0;
    for (char c : d) {
      if (c < '0' || c > '9') return false;
      *out = *out * 10 + (c - '0');
    }
    return true;
  };
  if (tail[0] != '-' || tail.substr(6, 4) != "-of-" || !digits(tail.substr(1, 5), no) ||
      !digits(tail.substr(10, 5), count)) {
    return false;
  }
  *prefix = std::string(base.substr(0, base.size() - kSuffix.size() - kTail));
  return true;
}

// An integer scalar's value, or nullopt when `key` is absent or not one.
std::optional<uint64_t> IntScalar(const GgufHeader& h, std::string_view key) {
  const GgufValue* v = h.Find(key);
  if (v == nullptr || !v->is_integer() || v->is_array()) return std::nullopt;
  return v->ints[0];
}

}  // namespace

absl::StatusOr<std::unique_ptr<GgufEngramFile>> GgufEngramFile::Open(const std::string& path) {
  std::unique_ptr<GgufEngramFile> f(new GgufEngramFile());
  f->path_ = path;
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string base = path.substr(dir.size());
  std::string prefix;
  int no = 0, count = 0;
  const bool named_split = ParseSplitName(base, &prefix, &no, &count);
  if (named_split) {
    if (count < 1 || no < 1 || no > count) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": the name says split ", no, " of ",
                                                     count, "; splits are numbered 1..", count));
    }
    for (int i = 1; i <= count; ++i) {
      f->files_.push_back(absl::StrFormat("%s%s-%05d-of-%05d.gguf", dir, prefix, i, count));
    }
    f->name_ = prefix;
  } else {
    f->files_.push_back(path);
    f->name_ = base.ends_with(".gguf") && base.size() > 5 ? base.substr(0, base.size() - 5) : base;
  }
  RETURN_IF_ERROR(f->OpenSplits(path, named_split));
  RETURN_IF_ERROR(f->BuildLayout());
  return f;
}

absl::Status GgufEngramFile::OpenSplits(const std::string& path, bool named_split) {
  const int n = static_cast<int>(files_.size());
  for (int i = 0; i < n; ++i) {
    const int fd = ::open(files_[i].c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      const std::string msg =
          n == 1 ? absl::StrCat("cannot open GGUF file ", path, ": ", std::strerror(err))
                 : absl::StrCat(path, ": split ", i + 1, " of ", n, " is missing: cannot open ",
                                files_[i], ": ", std::strerror(err));
      return err == ENOENT ? absl::NotFoundError(msg) : absl::InvalidArgumentError(msg);
    }
    fds_.push_back(fd);
  }
  uint64_t n_tensors = 0;
  for (int i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(GgufHeader h, ReadGgufHeader(fds_[i], files_[i]));
    const std::optional<uint64_t> no = IntScalar(h, "split.no");
    const std::optional<uint64_t> count = IntScalar(h, "split.count");
    n_tensors += h.tensors.size();
    headers_.push_back(std::move(h));
    if (!named_split) {
      if (count.value_or(1) != 1 || no.value_or(0) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": header says split.no ", no.value_or(0), " of split.count ",
                         count.value_or(1), " but the name is not PREFIX-NNNNN-of-NNNNN.gguf; ",
                         "open the split set by a split's own name"));
      }
      continue;
    }
    if (!no.has_value() || !count.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          files_[i], ": named as split ", i + 1, " of ", n, " but its header has no integer ",
          no.has_value() ? "split.count" : "split.no", "; not a gguf-split file"));
    }
    if (*count != static_cast<uint64_t>(n)) {
      return absl::InvalidArgumentError(absl::StrCat(files_[i], ": split.count is ", *count,
                                                     " but the file names say ", n, " splits"));
    }
    if (*no != static_cast<uint64_t>(i)) {
      return absl::InvalidArgumentError(absl::StrCat(files_[i], ": split.no is ", *no,
                                                     " but split ", i + 1, " of ", n, " must say ",
                                                     i, " (split.no counts from 0)"));
    }
  }
  // gguf-split writes the set's tensor count (an I32) into every split;
  // llama-model-loader refuses a set holding another number.
  if (const std::optional<uint64_t> want = IntScalar(headers_[0], "split.tensors.count");
      named_split && want.has_value() && *want != n_tensors) {
    return absl::InvalidArgumentError(absl::StrCat(files_[0], ": split.tensors.count says ",
                                                   static_cast<int64_t>(*want), " tensors but the ",
                                                   n, " splits hold ", n_tensors));
  }
  return absl::OkStatus();
}

absl::Status GgufEngramFile::FindTable(const std::string& name, int* split,
                                       const GgufTensorInfo** info) const {
  *info = nullptr;
  for (int s = 0; s < static_cast<int>(headers_.size()); ++s) {
    const GgufTensorInfo* t = headers_[s].FindTensor(name);
    if (t == nullptr) continue;
    if (*info != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor ", name, " is in both ",
                                                     files_[*split], " and ", files_[s]));
    }
    *split = s;
    *info = t;
  }
  if (*info == nullptr) {
    return absl::InvalidArgumentError(
        files_.size() == 1 ? absl::StrCat(path_, ": missing tensor ", name)
                           : absl::StrCat(path_, ": missing tensor ", name, " (in none of the ",
                                          files_.size(), " splits)"));
  }
  return absl::OkStatus();
}

absl::Status GgufEngramFile::ReadRows(int layer, uint64_t first, uint64_t n, uint8_t* out) const {
  if (layer < 0 || layer >= n_layers() || first > rows(layer) || n > rows(layer) - first) {
    return absl::OutOfRangeError(absl::StrCat(path_, ": rows [", first, ", ", first + n,
                                              ") of layer ", layer, " are outside the table"));
  }
  const Layer& lay = layers_[layer];
  const uint64_t rb = static_cast<uint64_t>(lay.row_bytes);
  uint64_t off = lay.offset + first * rb;  // inside the split, checked by Open
  uint64_t left = n * rb;
  while (left > 0) {
    const ssize_t got = ::pread(fds_[lay.split], out, left, static_cast<off_t>(off));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return absl::DataLossError(
          absl::StrCat(files_[lay.split], ": short read at byte ", off, " (layer ", layer,
                       "): ", got < 0 ? std::strerror(errno) : "end of file"));
    }
    out += got;
    off += static_cast<uint64_t>(got);
    left -= static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace engram
