#include "common/format/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/util/json_parse.h"
#include "common/util/status_macros.h"

namespace engram {
namespace {

using nlohmann::json;

absl::Status Invalid(absl::string_view what, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", msg));
}

uint64_t LoadLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

absl::StatusOr<uint64_t> GetU64(const json& j, absl::string_view what) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(j.get<int64_t>());
  }
  return Invalid(what, "expected a non-negative integer");
}

}  // namespace

uint64_t SafetensorsTensor::num_elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

const SafetensorsTensor* SafetensorsHeader::Find(std::string_view name) const {
  for (const SafetensorsTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

int SafetensorsDtypeBits(std::string_view d) {
  if (d == "F4") return 4;
  if (d == "F6_E2M3" || d == "F6_E3M2") return 6;
  if (d == "BOOL" || d == "U8" || d == "I8" || d == "F8_E4M3" || d == "F8_E5M2" || d == "F8_E8M0") {
    return 8;
  }
  if (d == "I16" || d == "U16" || d == "F16" || d == "BF16") return 16;
  if (d == "I32" || d == "U32" || d == "F32") return 32;
  if (d == "I64" || d == "U64" || d == "F64" || d == "C64") return 64;
  return 0;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view file_prefix,
                                                         uint64_t file_size,
                                                         std::string_view what_sv) {
  const absl::string_view what(what_sv.data(), what_sv.size());
  if (file_size < 8 || file_prefix.size() < 8) {
    return absl::DataLossError(
        absl::StrCat(what, ": too short for a safetensors file (", file_size, " bytes)"));
  }
  const uint64_t n = LoadLe64(file_prefix.data());
  if (n > kMaxSafetensorsHeaderBytes) {
    return Invalid(what,
                   absl::StrCat("safetensors header length ", n, " exceeds the 100 MB limit"));
  }
  if (8 + n > file_size) {
    return absl::DataLossError(absl::StrCat(what, ": safetensors header length ", n,
                                            " runs past the end of the file (", file_size,
                                            " bytes); file truncated?"));
  }
  if (file_prefix.size() < 8 + n) {
    return Invalid(what, "header bytes not supplied");
  }
  std::string_view text = file_prefix.substr(8, n);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\0')) {
    text.remove_suffix(1);
  }
  absl::StatusOr<json> parsed = ParseJson(text);
  if (!parsed.ok()) {
    return Invalid(what,
                   absl::StrCat("safetensors header is not JSON: ", parsed.status().message()));
  }
  const json& j = *parsed;
  if (!j.is_object()) {
    return Invalid(what, "safetensors header is not a JSON object");
  }

  SafetensorsHeader h;
  h.data_start = 8 + n;
  h.file_size = file_size;
  const uint64_t data_size = file_size - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return Invalid(what, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        h.metadata[m.key()] =
            m.value().is_string() ? m.value().get<std::string>() : m.value().dump();
      }
      continue;
    }
    const std::string at = absl::StrCat("tensor ", name);
    if (!v.is_object()) return Invalid(what, absl::StrCat(at, " is not an object"));
    SafetensorsTensor t;
    t.name = name;
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) {
      return Invalid(what, absl::StrCat(at, " has no string dtype"));
    }
    t.dtype = dt->get<std::string>();
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) {
      return Invalid(what, absl::StrCat(at, " has no shape array"));
    }
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : *sh) {
      ASSIGN_OR_RETURN(uint64_t dim, GetU64(d, absl::StrCat(what, ": ", at, " shape")));
      t.shape.push_back(dim);
      overflow = overflow || __builtin_mul_overflow(numel, dim, &numel);
    }
    if (overflow) {
      return Invalid(what, absl::StrCat(at, " shape [", absl::StrJoin(t.shape, ","),
                                        "] has more than 2^64 elements"));
    }
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2) {
      return Invalid(what, absl::StrCat(at, " has no data_offsets [begin, end]"));
    }
    ASSIGN_OR_RETURN(uint64_t b, GetU64((*off)[0], absl::StrCat(what, ": ", at, " begin")));
    ASSIGN_OR_RETURN(uint64_t e, GetU64((*off)[1], absl::StrCat(what, ": ", at, " end")));
    t.begin = b;
    t.end = e;
    if (t.begin > t.end) {
      return Invalid(what, absl::StrCat(at, " has data_offsets begin ", t.begin, " > end ", t.end));
    }
    if (t.end > data_size) {
      return absl::DataLossError(absl::StrCat(what, ": ", at, " data [", t.begin, ", ", t.end,
                                              ") extends past the end of the data section (",
                                              data_size, " bytes; file size ", file_size,
                                              "); file truncated?"));
    }
    if (const int bits = SafetensorsDtypeBits(t.dtype); bits > 0) {
      uint64_t nbits = 0;
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(bits), &nbits)) {
        return Invalid(what, absl::StrCat(at, " shape is too large"));
      }
      const uint64_t want = nbits / 8 + (nbits % 8 != 0);  // (nbits + 7) / 8 could wrap
      if (want != t.num_bytes()) {
        return Invalid(
            what, absl::StrCat(at, " shape [", absl::StrJoin(t.shape, ","), "] of ", t.dtype,
                               " needs ", want, " bytes but data_offsets span ", t.num_bytes()));
      }
    }
    h.tensors.push_back(std::move(t));
  }
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  for (size_t i = 1; i < h.tensors.size(); ++i) {
    const SafetensorsTensor& p = h.tensors[i - 1];
    const SafetensorsTensor& t = h.tensors[i];
    if (t.begin < p.end) {
      return Invalid(what, absl::StrCat("tensors ", p.name, " [", p.begin, ", ", p.end, ") and ",
                                        t.name, " [", t.begin, ", ", t.end, ") overlap"));
    }
  }
  return h;
}

absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(int fd, std::string_view what_sv) {
  const absl::string_view what(what_sv.data(), what_sv.size());
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(absl::StrCat(what, ": fstat failed: ", std::strerror(errno)));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    return absl::DataLossError(
        absl::StrCat(what, ": too short for a safetensors file (", size, " bytes)"));
  }
  std::string buf(8, '\0');
  RETURN_IF_ERROR(PreadFully(fd, buf.data(), 8, 0, what_sv));
  const uint64_t n = LoadLe64(buf.data());
  if (n <= kMaxSafetensorsHeaderBytes && 8 + n <= size) {
    buf.resize(8 + n);
    if (auto s = PreadFully(fd, buf.data() + 8, n, 8, what_sv); !s.ok()) return s;
  }
  return ParseSafetensorsHeader(buf, size, what_sv);  // reports bad lengths
}

absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    std::string msg = absl::StrCat("cannot open ", path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::InternalError(msg);
  }
  absl::StatusOr<SafetensorsHeader> h = ReadSafetensorsHeader(fd, path);
  ::close(fd);
  return h;
}

absl::Status PreadFully(int fd, void* buf, size_t n, uint64_t offset, std::string_view what_sv) {
  const absl::string_view what(what_sv.data(), what_sv.size());
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat(what, ": read failed: ", std::strerror(errno)));
    }
    if (r == 0) {
      return absl::DataLossError(absl::StrCat(what, ": unexpected end of file at offset ", offset));
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return absl::OkStatus();
}

absl::Status PwriteFully(int fd, const void* buf, size_t n, uint64_t offset,
                         std::string_view what_sv) {
  const absl::string_view what(what_sv.data(), what_sv.size());
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat(what, ": write failed: ", std::strerror(errno)));
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return absl::OkStatus();
}

std::string BuildSafetensorsHeader(const std::vector<SafetensorsTensor>& tensors,
                                   const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    j["__metadata__"] = std::move(m);
  }
  for (const SafetensorsTensor& t : tensors) {
    j[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = j.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<char>(n & 0xFF);
    n >>= 8;
  }
  out += text;
  return out;
}

absl::StatusOr<std::map<std::string, std::string, std::less<>>> ParseSafetensorsIndex(
    std::string_view text, std::string_view what) {
  absl::StatusOr<nlohmann::json> j = ParseJson(text);
  if (!j.ok())
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": ", j.status().message()));
  auto wm = j->is_object() ? j->find("weight_map") : j->end();
  if (!j->is_object() || wm == j->end() || !wm->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": no \"weight_map\" object (tensor name -> file)"));
  }
  std::map<std::string, std::string, std::less<>> out;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(what), ": weight_map[\"", it.key(), "\"] is not a file name"));
    }
    const std::string file = it->get<std::string>();
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
        file.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": weight_map[\"", it.key(),
                                                     "\"] = \"", file,
                                                     "\" is not a file of the checkpoint"));
    }
    out.emplace(it.key(), file);
  }
  return out;
}

}  // namespace engram
