#include "common/format/table.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/format/table_internal.h"
#include "common/util/status_macros.h"

namespace engram {
namespace {

using table_internal::ErrnoStatus;
using table_internal::FirstError;
using table_internal::JoinPath;

using XxhState = std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)>;

XxhState NewXxh() {
  XxhState st(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(st.get());
  return st;
}

}  // namespace

std::string EngramWeightTensorName(int64_t layer_id) {
  return absl::StrCat("layers.", layer_id, ".engram.embed.weight");
}
std::string EngramScaleTensorName(int64_t layer_id) {
  return absl::StrCat("layers.", layer_id, ".engram.embed.scale");
}

std::string FormatChecksum(uint64_t xxh3) {
  return absl::StrCat("xxh3_64:", absl::Hex(xxh3, absl::kZeroPad16));
}

std::string SourceChecksum(const std::vector<std::string>& layer_checksums) {
  std::string all;
  for (const std::string& c : layer_checksums) absl::StrAppend(&all, c, "\n");
  return FormatChecksum(XXH3_64bits(all.data(), all.size()));
}

absl::Status LocateRowTensor(const SafetensorsHeader& header, const std::string& path,
                             const LayerInfo& l, const std::string& name, std::string_view dtype,
                             uint64_t* offset) {
  const std::string at =
      absl::StrCat(path, ": tensor ", name, " (layer ", l.index, ", layer_id ", l.layer_id, ")");
  const SafetensorsTensor* t = header.Find(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat(at, " not found"));
  if (t->dtype != dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(at, " has dtype ", t->dtype, ", expected ", std::string(dtype)));
  }
  const uint64_t cols = static_cast<uint64_t>(dtype == kWeightDtype ? l.head_dim
                                              : dtype == kRowsDtype ? l.row_bytes
                                                                    : l.scale_bytes());
  if (t->shape != std::vector<uint64_t>{l.rows, cols}) {
    return absl::InvalidArgumentError(absl::StrCat(at, " has shape [", absl::StrJoin(t->shape, ","),
                                                   "], expected [", l.rows, ",", cols, "]"));
  }
  *offset = header.data_start + t->begin;
  return absl::OkStatus();
}

absl::Status ReadStoredRows(const RowTensors& t, const LayerInfo& l, uint64_t first, uint64_t n,
                            uint8_t* out) {
  if (n == 0) return absl::OkStatus();
  const size_t rb = static_cast<size_t>(l.row_bytes);
  if (l.encoding != RowEncoding::kFp8) {
    return PreadFully(t.weight_fd, out, n * rb, t.weight_offset + first * rb, t.path);
  }
  const size_t hd = static_cast<size_t>(l.head_dim);
  const size_t sc = static_cast<size_t>(l.scale_bytes());
  // Weights go to the tail of `out` and are moved forward row by row; row
  // i's destination [i*rb, (i+1)*rb) never reaches the source of row i+1.
  uint8_t* weights = out + n * sc;
  RETURN_IF_ERROR(PreadFully(t.weight_fd, weights, n * hd, t.weight_offset + first * hd, t.path));
  uint8_t small[512];
  std::unique_ptr<uint8_t[]> big;
  uint8_t* scales = small;
  if (n * sc > sizeof(small)) {
    big.reset(new uint8_t[n * sc]);
    scales = big.get();
  }
  RETURN_IF_ERROR(PreadFully(t.scale_fd, scales, n * sc, t.scale_offset + first * sc, t.path));
  for (size_t i = 0; i < n; ++i) {
    std::memmove(out + i * rb, weights + i * hd, hd);
    std::memcpy(out + i * rb + hd, scales + i * sc, sc);
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ reader

absl::StatusOr<std::unique_ptr<TableReader>> TableReader::Open(const std::string& table_dir) {
  ASSIGN_OR_RETURN(TableManifest m, TableManifest::Load(table_dir));
  std::unique_ptr<TableReader> r(new TableReader());
  r->manifest_ = std::move(m);
  if (r->manifest_.rows_file.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        table_dir, " holds a table's manifest only (engramctl manifest); its rows are in ",
        r->manifest_.source_kind, " ", r->manifest_.source_path, ": import from there with --",
        r->manifest_.source_kind == "gguf" ? "gguf" : "checkpoint"));
  }
  r->rows_path_ = JoinPath(table_dir, r->manifest_.rows_file);
  const std::string& path = r->rows_path_;
  r->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (r->fd_ < 0) return ErrnoStatus(absl::StrCat("cannot open rows file ", path), errno);
  ASSIGN_OR_RETURN(SafetensorsHeader h, ReadSafetensorsHeader(r->fd_, path));
  r->header_ = std::move(h);
  for (const LayerInfo& l : r->manifest_.layers) {
    RowTensors t;
    t.weight_fd = t.scale_fd = r->fd_;
    t.path = path;
    if (l.encoding != RowEncoding::kFp8) {
      RETURN_IF_ERROR(
          LocateRowTensor(r->header_, path, l, l.weight_tensor, kRowsDtype, &t.weight_offset));
    } else {
      RETURN_IF_ERROR(FirstError(
          {LocateRowTensor(r->header_, path, l, l.weight_tensor, kWeightDtype, &t.weight_offset),
           LocateRowTensor(r->header_, path, l, l.scale_tensor, kScaleDtype, &t.scale_offset)}));
    }
    r->tensors_.push_back(t);
  }
  return r;
}

TableReader::~TableReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status TableReader::ReadRows(int layer, uint64_t first, uint64_t n, uint8_t* out) const {
  if (layer < 0 || layer >= static_cast<int>(manifest_.layers.size())) {
    return absl::OutOfRangeError(
        absl::StrCat("layer ", layer, " out of range [0, ", manifest_.layers.size(), ")"));
  }
  const LayerInfo& l = manifest_.layers[layer];
  if (first > l.rows || n > l.rows - first) {
    return absl::OutOfRangeError(absl::StrCat("rows [", first, ", ", first + n,
                                              ") out of range for layer ", layer, " with ", l.rows,
                                              " rows"));
  }
  return ReadStoredRows(tensors_[layer], l, first, n, out);
}

absl::Status TableReader::VerifyChecksums(
    const std::function<void(uint64_t, uint64_t)>& progress) const {
  const uint64_t total = manifest_.total_rows();
  uint64_t done = 0;
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < manifest_.layers.size(); ++i) {
    const LayerInfo& l = manifest_.layers[i];
    const uint64_t chunk = std::max<uint64_t>(1, (4u << 20) / l.row_bytes);
    buf.resize(chunk * l.row_bytes);
    XxhState st = NewXxh();
    for (uint64_t row = 0; row < l.rows; row += chunk) {
      const uint64_t n = std::min(chunk, l.rows - row);
      RETURN_IF_ERROR(ReadRows(static_cast<int>(i), row, n, buf.data()));
      XXH3_64bits_update(st.get(), buf.data(), n * l.row_bytes);
      done += n;
      if (progress) progress(done, total);
    }
    const std::string got = FormatChecksum(XXH3_64bits_digest(st.get()));
    if (got != l.checksum) {
      return absl::DataLossError(absl::StrCat(rows_path_, ": layer ", i, " (layer_id ", l.layer_id,
                                              ") checksum mismatch: manifest says ", l.checksum,
                                              ", rows hash to ", got));
    }
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ writer

struct TableWriter::LayerState {
  uint64_t weight_offset = 0;  // absolute file offsets
  uint64_t scale_offset = 0;
  uint64_t next_row = 0;
  XxhState xxh = NewXxh();
};

TableWriter::TableWriter() = default;

TableWriter::~TableWriter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::unique_ptr<TableWriter>> TableWriter::Create(const std::string& table_dir,
                                                                 TableManifest manifest) {
  for (size_t i = 0; i < manifest.layers.size(); ++i) {
    LayerInfo& l = manifest.layers[i];
    l.index = static_cast<int>(i);
    l.checksum.clear();
    if (l.weight_tensor.empty()) l.weight_tensor = EngramWeightTensorName(l.layer_id);
    const bool fp8 = l.encoding == RowEncoding::kFp8;
    if (fp8 && l.scale_tensor.empty()) l.scale_tensor = EngramScaleTensorName(l.layer_id);
    if (l.row_bytes == 0) {  // else Validate says what is wrong
      l.row_bytes = EncodedRowBytes(l.encoding, l.head_dim, l.scale_block).value_or(0);
    }
  }
  if (manifest.rows_file.empty()) manifest.rows_file = kDefaultRowsFile;
  if (auto s = manifest.Validate(/*require_checksums=*/false); !s.ok()) return s;

  std::error_code ec;
  std::filesystem::create_directories(table_dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create ", table_dir, ": ", ec.message()));
  }
  const std::string manifest_path = JoinPath(table_dir, kManifestFile);
  if (::unlink(manifest_path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(absl::StrCat("cannot remove old ", manifest_path), errno);
  }

  std::unique_ptr<TableWriter> w(new TableWriter());
  w->dir_ = table_dir;
  // Per layer: fp8 weight and scale tensors, or one tensor of the rows.
  std::vector<SafetensorsTensor> tensors;
  uint64_t cursor = 0;
  auto add = [&](const std::string& name, const char* dtype, uint64_t rows, int cols) {
    const uint64_t c = static_cast<uint64_t>(cols);
    tensors.push_back({name, dtype, {rows, c}, cursor, cursor + rows * c});
    cursor += rows * c;
    return tensors.back().begin;
  };
  for (const LayerInfo& l : manifest.layers) {
    auto st = std::make_unique<LayerState>();
    if (l.encoding == RowEncoding::kFp8) {
      st->weight_offset = add(l.weight_tensor, kWeightDtype, l.rows, l.head_dim);
      st->scale_offset = add(l.scale_tensor, kScaleDtype, l.rows, l.scale_bytes());
    } else {
      st->weight_offset = add(l.weight_tensor, kRowsDtype, l.rows, l.row_bytes);
    }
    w->layers_.push_back(std::move(st));
  }
  const std::string header =
      BuildSafetensorsHeader(tensors, {{"format", kTableFormat},
                                       {"table", manifest.table},
                                       {"version", absl::StrCat(manifest.version)}});
  for (auto& st : w->layers_) {  // offsets in the file, past the header
    st->weight_offset += header.size();
    st->scale_offset += header.size();
  }
  const std::string rows_path = JoinPath(table_dir, manifest.rows_file);
  w->fd_ = ::open(rows_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return ErrnoStatus(absl::StrCat("cannot create ", rows_path), errno);
  RETURN_IF_ERROR(PwriteFully(w->fd_, header.data(), header.size(), 0, rows_path));
  if (::ftruncate(w->fd_, static_cast<off_t>(header.size() + cursor)) != 0) {
    return ErrnoStatus(absl::StrCat("cannot size ", rows_path), errno);
  }
  w->manifest_ = std::move(manifest);
  return w;
}

absl::Status TableWriter::AppendRows(int layer, const uint8_t* rows, uint64_t n) {
  if (finished_) return absl::FailedPreconditionError("TableWriter: already finished");
  if (layer < 0 || layer >= static_cast<int>(layers_.size())) {
    return absl::OutOfRangeError(absl::StrCat("TableWriter: layer ", layer, " out of range"));
  }
  const LayerInfo& l = manifest_.layers[layer];
  LayerState& st = *layers_[layer];
  if (n > l.rows - st.next_row) {
    return absl::OutOfRangeError(absl::StrCat("TableWriter: layer ", layer, " has ", l.rows,
                                              " rows; ", st.next_row, " written, ", n,
                                              " more appended"));
  }
  if (n == 0) return absl::OkStatus();
  const size_t rb = static_cast<size_t>(l.row_bytes);
  const std::string what = JoinPath(dir_, manifest_.rows_file);
  if (l.encoding != RowEncoding::kFp8) {
    RETURN_IF_ERROR(PwriteFully(fd_, rows, n * rb, st.weight_offset + st.next_row * rb, what));
    XXH3_64bits_update(st.xxh.get(), rows, n * rb);
    st.next_row += n;
    return absl::OkStatus();
  }
  const size_t hd = static_cast<size_t>(l.head_dim);
  const size_t sc = static_cast<size_t>(l.scale_bytes());
  weight_buf_.resize(n * hd);
  scale_buf_.resize(n * sc);
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(weight_buf_.data() + i * hd, rows + i * rb, hd);
    std::memcpy(scale_buf_.data() + i * sc, rows + i * rb + hd, sc);
  }
  RETURN_IF_ERROR(
      PwriteFully(fd_, weight_buf_.data(), n * hd, st.weight_offset + st.next_row * hd, what));
  RETURN_IF_ERROR(
      PwriteFully(fd_, scale_buf_.data(), n * sc, st.scale_offset + st.next_row * sc, what));
  XXH3_64bits_update(st.xxh.get(), rows, n * rb);
  st.next_row += n;
  return absl::OkStatus();
}

absl::Status TableWriter::Finish() {
  if (finished_) return absl::FailedPreconditionError("TableWriter: already finished");
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i]->next_row != manifest_.layers[i].rows) {
      return absl::FailedPreconditionError(absl::StrCat("TableWriter: layer ", i, " has ",
                                                        layers_[i]->next_row, " of ",
                                                        manifest_.layers[i].rows, " rows"));
    }
  }
  const std::string rows_path = JoinPath(dir_, manifest_.rows_file);
  if (::fsync(fd_) != 0) return ErrnoStatus(absl::StrCat("fsync ", rows_path), errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return ErrnoStatus(absl::StrCat("close ", rows_path), errno);
  for (size_t i = 0; i < layers_.size(); ++i) {
    manifest_.layers[i].checksum = FormatChecksum(XXH3_64bits_digest(layers_[i]->xxh.get()));
  }
  RETURN_IF_ERROR(manifest_.Save(dir_));
  finished_ = true;
  return absl::OkStatus();
}

}  // namespace engram
