#include "shard/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

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
constexpr char kPrefix[] = "deepseek41.engram.";
constexpr uint64_t kMaxRows = uint64_t{1} << 48;

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

// Bytes per element of a scalar GGUF type, 0 for strings/arrays/unknown.
uint64_t ScalarBytes(GgufType t) {
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

bool IsIntegerType(GgufType t) {
  return ScalarBytes(t) != 0 && t != GgufType::kF32 && t != GgufType::kF64;
}

bool IsSignedType(GgufType t) {
  return t == GgufType::kI8 || t == GgufType::kI16 || t == GgufType::kI32 || t == GgufType::kI64;
}

// Reads one integer of type t (IsIntegerType) as a 64-bit pattern.
absl::Status GetInt(Cursor& c, GgufType t, uint64_t* out) {
  uint8_t raw[8] = {0};
  const uint64_t n = ScalarBytes(t);
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
      const uint64_t width = ScalarBytes(out->elem_type);
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

std::string GgmlTypeName(uint32_t type) {
  static constexpr const char* kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  nullptr,  nullptr, "Q5_0",  "Q5_1",
      "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16"};
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
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::unique_ptr<GgufEngramFile>> GgufEngramFile::Open(const std::string& path) {
  std::unique_ptr<GgufEngramFile> f(new GgufEngramFile());
  f->path_ = path;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd_ < 0) {
    const std::string msg =
        absl::StrCat("cannot open GGUF file ", path, ": ", std::strerror(errno));
    return errno == ENOENT ? absl::NotFoundError(msg) : absl::InvalidArgumentError(msg);
  }
  ASSIGN_OR_RETURN(GgufHeader h, ReadGgufHeader(f->fd_, path));
  f->header_ = std::move(h);
  RETURN_IF_ERROR(f->BuildLayout());
  return f;
}

absl::Status GgufEngramFile::ReadRows(int layer, uint64_t first, uint64_t n, uint8_t* out) const {
  if (layer < 0 || layer >= n_layers() || first > rows(layer) || n > rows(layer) - first) {
    return absl::OutOfRangeError(absl::StrCat(path_, ": rows [", first, ", ", first + n,
                                              ") of layer ", layer, " are outside the table"));
  }
  uint64_t off = tensor_offsets_[layer] + first * kRowBytes;
  uint64_t left = n * kRowBytes;
  while (left > 0) {
    const ssize_t got = ::pread(fd_, out, left, static_cast<off_t>(off));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return absl::DataLossError(
          absl::StrCat(path_, ": short read at byte ", off, " (layer ", layer,
                       "): ", got < 0 ? std::strerror(errno) : "end of file"));
    }
    out += got;
    off += static_cast<uint64_t>(got);
    left -= static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

absl::Status GgufEngramFile::BuildLayout() {
  auto bad = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", parts...));
  };
  const GgufValue* arch = header_.Find("general.architecture");
  if (arch == nullptr || arch->type != GgufType::kString) {
    return bad("no general.architecture string; not a DeepSeek-V4.1 GGUF");
  }
  if (arch->str != "deepseek41") {
    return bad("architecture is '", arch->str, "', want 'deepseek41' (a DeepSeek-V4.1 GGUF)");
  }
  const std::string prefix = kPrefix;
  const GgufValue* enc = header_.Find(prefix + "encoding");
  if (enc == nullptr || enc->type != GgufType::kString) {
    return bad("missing string metadata ", prefix, "encoding");
  }
  if (enc->str != kEncoding) {
    return bad("Engram tables are encoded as '", enc->str, "'; only '", kEncoding,
               "' (the checkpoint's fp8 rows) can be served; "
               "re-convert the model without re-quantising the Engram tables");
  }
  // Integer metadata, as 64-bit patterns. Negative values are refused unless
  // `bits` (multipliers are int64 bit patterns).
  auto ints = [&](const char* key, bool required, bool want_array, bool bits,
                  std::vector<uint64_t>* out) -> absl::Status {
    const GgufValue* v = header_.Find(prefix + key);
    out->clear();
    if (v == nullptr) {
      return required ? bad("missing metadata ", prefix, key) : absl::OkStatus();
    }
    if (!v->is_integer() || v->is_array() != want_array) {
      return bad("metadata ", prefix, key, " must be an integer ", want_array ? "array" : "scalar");
    }
    if (!bits && v->is_signed()) {
      for (uint64_t x : v->ints) {
        if (static_cast<int64_t>(x) < 0) {
          return bad("metadata ", prefix, key, " holds the negative value ",
                     static_cast<int64_t>(x));
        }
      }
    }
    *out = v->ints;
    return absl::OkStatus();
  };
  std::vector<uint64_t> layer_ids, rows, token_map, primes, multipliers, offsets, compressed, pad,
      max_ngram, head_count;
  struct Want {
    const char* key;
    std::vector<uint64_t>* out;
    bool required, array, bits;
  };
  const Want wants[] = {
      {"layer_ids", &layer_ids, true, true, false},
      {"rows", &rows, true, true, false},
      {"token_map", &token_map, true, true, false},
      {"primes", &primes, true, true, false},
      {"multipliers", &multipliers, true, true, true},
      {"offsets", &offsets, false, true, false},
      {"compressed_vocab_size", &compressed, true, false, false},
      {"pad_id", &pad, true, false, false},
      {"max_ngram_size", &max_ngram, false, false, false},
      {"head_count", &head_count, false, false, false},
  };
  for (const Want& w : wants) {
    RETURN_IF_ERROR(ints(w.key, w.required, w.array, w.bits, w.out));
  }
  const uint64_t L = layer_ids.size();
  if (L == 0) return bad(prefix, "layer_ids is empty");
  if (rows.size() != L) {
    return bad(prefix, "rows has ", rows.size(), " entries for ", L, " layers");
  }
  if (token_map.empty()) return bad(prefix, "token_map is empty");
  const uint64_t N = max_ngram.empty() ? multipliers.size() / L : max_ngram[0];
  if (N < 2 || N > 64 || multipliers.size() != L * N) {
    return bad(prefix, "multipliers has ", multipliers.size(), " entries; want max_ngram_size (", N,
               ", at least 2) per layer "
               "for ",
               L, " layers");
  }
  const uint64_t per_head = L * (N - 1);
  const uint64_t H = head_count.empty() ? primes.size() / per_head : head_count[0];
  if (H < 1 || H > 4096 || primes.size() != per_head * H) {
    return bad(prefix, "primes has ", primes.size(), " entries; want ", L, " layers x ", N - 1,
               " orders x head_count (", H, ")");
  }
  const uint64_t cols = (N - 1) * H;
  if (!offsets.empty() && offsets.size() != L * cols) {
    return bad(prefix, "offsets has ", offsets.size(), " entries, want ", L * cols);
  }
  for (size_t t = 0; t < token_map.size(); ++t) {
    if (token_map[t] >= compressed[0]) {
      return bad(prefix, "token_map[", t, "] = ", token_map[t],
                 " is not below compressed_vocab_size ", compressed[0]);
    }
  }
  HashLayout& lay = layout_;
  lay.vocab_size = static_cast<int64_t>(token_map.size());
  lay.max_ngram_size = static_cast<int>(N);
  lay.n_heads = static_cast<int>(H);
  lay.pad_id = static_cast<int64_t>(pad[0]);
  lay.token_map.assign(token_map.begin(), token_map.end());
  lay.engram_layer_ids.assign(layer_ids.begin(), layer_ids.end());
  lay.table_rows.assign(rows.begin(), rows.end());
  lay.multipliers.assign(L, {});
  lay.primes.assign(L, std::vector<std::vector<int64_t>>(N - 1));
  lay.offsets.assign(L, {});
  tensor_offsets_.assign(L, 0);
  for (uint64_t l = 0; l < L; ++l) {
    lay.multipliers[l].assign(multipliers.begin() + l * N, multipliers.begin() + (l + 1) * N);
    if (rows[l] == 0 || rows[l] > kMaxRows) {
      return bad(prefix, "rows[", l, "] = ", rows[l], " is outside 1..2^48");
    }
    uint64_t sum = 0;  // <= kMaxRows, so sum * kRowBytes and the offsets fit
    for (uint64_t c = 0; c < cols; ++c) {
      const uint64_t p = primes[l * cols + c];
      if (p == 0) return bad(prefix, "primes[", l * cols + c, "] is 0");
      if (p > kMaxRows - sum) {
        return bad(prefix, "primes[", l * cols + c, "] = ", p, " is out of range: layer ",
                   layer_ids[l], "'s primes would sum past 2^48");
      }
      lay.primes[l][c / H].push_back(static_cast<int64_t>(p));
      lay.offsets[l].push_back(static_cast<int64_t>(offsets.empty() ? sum : offsets[l * cols + c]));
      sum += p;
    }
    if (sum != rows[l]) {
      return bad("layer ", layer_ids[l], ": primes sum to ", sum, " but ", prefix, "rows says ",
                 rows[l]);
    }
    const std::string tname = absl::StrCat("blk.", layer_ids[l], ".engram_embd.weight");
    const GgufTensorInfo* t = header_.FindTensor(tname);
    if (t == nullptr) return bad("missing tensor ", tname);
    if (t->type != kGgmlTypeI8) {
      return bad("tensor ", tname, " has GGML type ", GgmlTypeName(t->type), "; want I8 (raw ",
                 kEncoding, " rows)");
    }
    if (t->dims.size() != 2 || t->dims[0] != kRowBytes || t->dims[1] != sum) {
      std::string dims;
      for (uint64_t d : t->dims) absl::StrAppend(&dims, dims.empty() ? "" : ", ", d);
      return bad("tensor ", tname, " has dims [", dims, "]; want [", kRowBytes, ", ", sum,
                 "] (row bytes, the layer's primes sum)");
    }
    const uint64_t begin = header_.data_start + t->offset;
    if (t->offset > header_.file_size || begin + sum * kRowBytes > header_.file_size) {
      return absl::DataLossError(absl::StrCat(path_, ": tensor ", tname, " ends at byte ",
                                              begin + sum * kRowBytes, " but the file has ",
                                              header_.file_size, " bytes; it is truncated"));
    }
    tensor_offsets_[l] = begin;
  }
  if (auto s = lay.Validate(); !s.ok()) return bad(s.message());
  const GgufValue* name = header_.Find("general.name");
  if (name != nullptr && name->type == GgufType::kString && !name->str.empty()) {
    name_ = name->str;
  } else {
    name_ = path_.substr(path_.find_last_of('/') + 1);
    if (name_.size() > 5 && name_.ends_with(".gguf")) {
      name_.resize(name_.size() - 5);
    }
  }
  return absl::OkStatus();
}

}  // namespace engram
