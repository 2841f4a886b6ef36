#include "common/format/table.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/format/table_internal.h"
#include "common/hash/layout_json.h"
#include "common/util/json_parse.h"
#include "common/util/status_macros.h"

namespace engram {
namespace {

using nlohmann::json;
using table_internal::ErrnoStatus;
using table_internal::FirstError;
using table_internal::JoinPath;

absl::Status Bad(absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("table manifest: ", msg));
}

// Writes `data` to `path` via path.tmp + fsync + rename + fsync(dir).
absl::Status WriteFileAtomic(const std::string& dir, const std::string& path,
                             std::string_view data) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(absl::StrCat("cannot create ", tmp), errno);
  absl::Status s = PwriteFully(fd, data.data(), data.size(), 0, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoStatus(absl::StrCat("fsync ", tmp), errno);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoStatus(absl::StrCat("rename ", tmp, " -> ", path), errno);
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

// Reads member `key` of the object `j` into *out (an integer type or
// std::string); InvalidArgument prefixed with `at` if absent or ill-typed.
template <typename T>
absl::Status Get(const json& j, const char* key, absl::string_view at, T* out) {
  auto it = j.find(key);
  if (it == j.end()) {
    return Bad(absl::StrCat(at, "missing member \"", key, "\""));
  }
  if constexpr (std::is_same_v<T, std::string>) {
    if (it->is_string()) {
      *out = it->template get<std::string>();
      return absl::OkStatus();
    }
  } else if (it->is_number_unsigned()) {
    if (const auto v = it->template get<uint64_t>(); std::in_range<T>(v)) {
      *out = static_cast<T>(v);
      return absl::OkStatus();
    }
  } else if (it->is_number_integer()) {
    if (const auto v = it->template get<int64_t>(); std::in_range<T>(v)) {
      *out = static_cast<T>(v);
      return absl::OkStatus();
    }
  }
  return Bad(absl::StrCat(at, "member \"", key, "\" must be ",
                          std::is_same_v<T, std::string> ? "a string" : "an integer in range"));
}

bool WellFormedChecksum(std::string_view c) {
  constexpr std::string_view kPrefix = "xxh3_64:";
  if (c.size() != kPrefix.size() + 16 || c.substr(0, kPrefix.size()) != kPrefix) {
    return false;
  }
  for (char ch : c.substr(kPrefix.size())) {
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  }
  return true;
}

bool SafeRelativePath(const std::string& p) {
  if (p.empty() || p.front() == '/') return false;
  for (absl::string_view part : absl::StrSplit(p, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

// kFp8 layers keep the fields manifests had before encodings existed
// (dtypes, scale block and tensor); other encodings name their one tensor.
json LayerToJson(const LayerInfo& l) {
  json j;
  j["index"] = l.index;
  j["layer_id"] = l.layer_id;
  j["rows"] = l.rows;
  j["encoding"] = RowEncodingName(l.encoding);
  j["head_dim"] = l.head_dim;
  if (l.encoding == RowEncoding::kFp8) j["scale_block"] = l.scale_block;
  j["row_bytes"] = l.row_bytes;
  if (l.encoding == RowEncoding::kFp8) {
    j["weight_dtype"] = kWeightDtype;
    j["scale_dtype"] = kScaleDtype;
  }
  j["weight_tensor"] = l.weight_tensor;
  if (l.encoding == RowEncoding::kFp8) j["scale_tensor"] = l.scale_tensor;
  j["checksum"] = l.checksum;
  return j;
}

absl::StatusOr<LayerInfo> LayerFromJson(const json& j, size_t i) {
  const std::string at = absl::StrCat("layers[", i, "]: ");
  if (!j.is_object()) return Bad(absl::StrCat(at, "not an object"));
  LayerInfo l;
  std::string encoding(RowEncodingName(RowEncoding::kFp8));
  if (j.contains("encoding")) RETURN_IF_ERROR(Get(j, "encoding", at, &encoding));
  absl::StatusOr<RowEncoding> e = ParseRowEncoding(encoding);
  if (!e.ok()) return Bad(absl::StrCat(at, e.status().message()));
  l.encoding = *e;
  RETURN_IF_ERROR(FirstError({Get(j, "index", at, &l.index), Get(j, "layer_id", at, &l.layer_id),
                              Get(j, "rows", at, &l.rows), Get(j, "head_dim", at, &l.head_dim),
                              Get(j, "row_bytes", at, &l.row_bytes),
                              Get(j, "weight_tensor", at, &l.weight_tensor),
                              Get(j, "checksum", at, &l.checksum)}));
  if (l.encoding != RowEncoding::kFp8) return l;
  std::string weight_dtype, scale_dtype;
  RETURN_IF_ERROR(FirstError(
      {Get(j, "scale_block", at, &l.scale_block), Get(j, "weight_dtype", at, &weight_dtype),
       Get(j, "scale_dtype", at, &scale_dtype), Get(j, "scale_tensor", at, &l.scale_tensor)}));
  if (weight_dtype != kWeightDtype || scale_dtype != kScaleDtype) {
    return Bad(absl::StrCat(at, "dtypes ", weight_dtype, "/", scale_dtype,
                            " unsupported; expected ", kWeightDtype, "/", kScaleDtype));
  }
  return l;
}

}  // namespace

// ---------------------------------------------------------------- manifest

absl::StatusOr<TableManifest> TableManifest::ForLayout(std::string table, uint64_t version,
                                                       HashLayout layout, int head_dim,
                                                       int scale_block, RowEncoding encoding) {
  TableManifest m;
  m.table = std::move(table);
  m.version = version;
  m.layout = std::move(layout);
  for (int i = 0; i < m.layout.n_layers(); ++i) {
    LayerInfo l;
    l.index = i;
    l.layer_id = m.layout.engram_layer_ids[i];
    l.rows = static_cast<uint64_t>(m.layout.table_rows[i]);
    l.encoding = encoding;
    l.head_dim = head_dim;
    l.scale_block = scale_block;
    l.row_bytes = EncodedRowBytes(encoding, head_dim, scale_block).value_or(0);
    l.weight_tensor = EngramWeightTensorName(l.layer_id);
    if (encoding == RowEncoding::kFp8) l.scale_tensor = EngramScaleTensorName(l.layer_id);
    m.layers.push_back(std::move(l));
  }
  RETURN_IF_ERROR(m.Validate(/*require_checksums=*/false));
  return m;
}

absl::Status TableManifest::Validate(bool require_checksums) const {
  if (table.empty()) return Bad("table name is empty");
  if (!rows_file.empty() && !SafeRelativePath(rows_file)) {
    return Bad(
        absl::StrCat("rows_file \"", rows_file, "\" must be a relative path inside the table"));
  }
  RETURN_IF_ERROR(layout.Validate());
  if (static_cast<int>(layers.size()) != layout.n_layers()) {
    return Bad(absl::StrCat("has ", layers.size(), " layers, the layout has ", layout.n_layers()));
  }
  std::set<std::string> names;
  uint64_t total_rows = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerInfo& l = layers[i];
    const std::string at = absl::StrCat("layers[", i, "] (layer_id ", l.layer_id, "): ");
    if (l.index != static_cast<int>(i)) {
      return Bad(absl::StrCat(at, "index is ", l.index));
    }
    if (l.layer_id != layout.engram_layer_ids[i]) {
      return Bad(
          absl::StrCat(at, "layout.engram_layer_ids[", i, "] is ", layout.engram_layer_ids[i]));
    }
    if (l.rows != static_cast<uint64_t>(layout.table_rows[i])) {
      return Bad(absl::StrCat(at, "rows ", l.rows, " != layout.table_rows[", i, "] ",
                              layout.table_rows[i]));
    }
    const bool fp8 = l.encoding == RowEncoding::kFp8;
    if (fp8 && (l.head_dim <= 0 || l.scale_block <= 0 || l.head_dim % l.scale_block != 0)) {
      return Bad(absl::StrCat(at, "head_dim ", l.head_dim,
                              " must be a positive multiple of scale_block ", l.scale_block));
    }
    if (!fp8 && l.scale_block != 0) {
      return Bad(
          absl::StrCat(at, "scale_block is for e4m3_e8m0 rows, not ", RowEncodingName(l.encoding)));
    }
    if (__builtin_add_overflow(total_rows, l.rows, &total_rows)) {
      return Bad(absl::StrCat(at, "the layers hold more than 2^64 rows in total"));
    }
    absl::StatusOr<int> row_bytes = EncodedRowBytes(l.encoding, l.head_dim, l.scale_block);
    if (!row_bytes.ok()) return Bad(absl::StrCat(at, row_bytes.status().message()));
    if (l.row_bytes != *row_bytes) {
      return Bad(absl::StrCat(at, "row_bytes ", l.row_bytes, " != ", *row_bytes, " (",
                              RowEncodingName(l.encoding), ", head_dim ", l.head_dim, ")"));
    }
    // A rows file holds a kFp8 layer in two tensors; a source may hold its
    // stored rows in one (a ds4 GGUF).
    if (l.weight_tensor.empty() || (fp8 && !rows_file.empty() && l.scale_tensor.empty())) {
      return Bad(absl::StrCat(at, "empty tensor name"));
    }
    if (!fp8 && !l.scale_tensor.empty()) {
      return Bad(absl::StrCat(at, "a scale tensor without e4m3_e8m0 rows"));
    }
    for (const std::string* n : {&l.weight_tensor, &l.scale_tensor}) {
      if (!n->empty() && !names.insert(*n).second) {
        return Bad(absl::StrCat(at, "tensor ", *n, " used twice"));
      }
    }
    if (require_checksums && !WellFormedChecksum(l.checksum)) {
      return Bad(absl::StrCat(at, "checksum \"", l.checksum, "\" is not \"xxh3_64:<16 hex>\""));
    }
  }
  return absl::OkStatus();
}

uint64_t TableManifest::total_rows() const {
  uint64_t n = 0;
  for (const LayerInfo& l : layers) n += l.rows;
  return n;
}

std::string TableManifest::source_checksum() const {
  std::vector<std::string> sums;
  for (const LayerInfo& l : layers) sums.push_back(l.checksum);
  return SourceChecksum(sums);
}

std::string TableManifest::ToJson() const {
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"format\": ", json(kTableFormat).dump(), ",\n");
  absl::StrAppend(&out, "  \"format_version\": ", kTableFormatVersion, ",\n");
  absl::StrAppend(&out, "  \"table\": ", json(table).dump(), ",\n");
  absl::StrAppend(&out, "  \"version\": ", version, ",\n");
  absl::StrAppend(&out, "  \"rows_file\": ", json(rows_file).dump(), ",\n");
  if (!source_kind.empty()) {
    absl::StrAppend(
        &out, "  \"source\": ", json({{"kind", source_kind}, {"path", source_path}}).dump(), ",\n");
  }
  out += "  \"layers\": [";
  for (size_t i = 0; i < layers.size(); ++i) {
    absl::StrAppend(&out, i ? ",\n    " : "\n    ", LayerToJson(layers[i]).dump());
  }
  out += "\n  ],\n";
  absl::StrAppend(&out, "  \"layout\": ", LayoutToJsonValue(layout).dump(), "\n}\n");
  return out;
}

absl::StatusOr<TableManifest> TableManifest::FromJson(std::string_view text) {
  absl::StatusOr<json> parsed = ParseJson(text);
  if (!parsed.ok()) return Bad(parsed.status().message());
  const json& j = *parsed;
  if (!j.is_object()) return Bad("not a JSON object");
  TableManifest m;
  std::string format;
  uint64_t format_version = 0;
  RETURN_IF_ERROR(
      FirstError({Get(j, "format", "", &format), Get(j, "format_version", "", &format_version)}));
  if (format != kTableFormat || format_version != kTableFormatVersion) {
    return Bad(absl::StrCat("format \"", format, "\" version ", format_version,
                            " unsupported; expected \"", kTableFormat, "\" version ",
                            kTableFormatVersion));
  }
  RETURN_IF_ERROR(FirstError({Get(j, "table", "", &m.table), Get(j, "version", "", &m.version),
                              Get(j, "rows_file", "", &m.rows_file)}));
  if (auto src = j.find("source"); src != j.end()) {
    if (!src->is_object()) return Bad("member \"source\" must be an object");
    RETURN_IF_ERROR(FirstError({Get(*src, "kind", "source: ", &m.source_kind),
                                Get(*src, "path", "source: ", &m.source_path)}));
  }
  auto lay = j.find("layout");
  if (lay == j.end()) return Bad("missing member \"layout\"");
  ASSIGN_OR_RETURN(HashLayout layout, LayoutFromJsonValue(*lay));
  m.layout = std::move(layout);
  auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_array()) {
    return Bad("missing array member \"layers\"");
  }
  for (size_t i = 0; i < layers->size(); ++i) {
    ASSIGN_OR_RETURN(LayerInfo l, LayerFromJson((*layers)[i], i));
    m.layers.push_back(std::move(l));
  }
  RETURN_IF_ERROR(m.Validate(/*require_checksums=*/true));
  return m;
}

absl::StatusOr<TableManifest> TableManifest::Load(const std::string& table_dir) {
  const std::string path = JoinPath(table_dir, kManifestFile);
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("cannot read ", path));
  absl::StatusOr<TableManifest> m = FromJson(buf.str());
  if (!m.ok()) {
    return absl::Status(m.status().code(), absl::StrCat(path, ": ", m.status().message()));
  }
  return m;
}

absl::Status TableManifest::Save(const std::string& table_dir) const {
  RETURN_IF_ERROR(Validate(/*require_checksums=*/true));
  return WriteFileAtomic(table_dir, JoinPath(table_dir, kManifestFile), ToJson());
}

}  // namespace engram
