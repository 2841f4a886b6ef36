#include "shard/import/checkpoint_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/format/safetensors.h"
#include "common/util/file_util.h"
#include "common/util/json_parse.h"
#include "common/util/status_macros.h"
#include "shard/import/checkpoint_config.h"
#include "shard/import/token_map.h"

namespace engram {
namespace {

namespace fs = std::filesystem;

// config.json and the index are a few KB to a few MB; tokenizer.json ~8 MB.
constexpr uint64_t kMaxSmallFileBytes = uint64_t{64} << 20;
constexpr uint64_t kMaxTokenizerBytes = uint64_t{512} << 20;

absl::StatusOr<std::string> ReadBounded(const std::string& path, uint64_t max_bytes) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", ec.message()));
  }
  if (size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, " has ", size, " bytes, more than the ",
                                                   max_bytes, " such a file can plausibly hold"));
  }
  return ReadFileToString(path);
}

// One safetensors file of the checkpoint, open for pread.
struct OpenFile {
  std::string path;
  int fd = -1;
  SafetensorsHeader header;
};

class CheckpointSource : public RowSource {
 public:
  ~CheckpointSource() override {
    for (const std::unique_ptr<OpenFile>& f : files_) {
      if (f->fd >= 0) ::close(f->fd);
    }
  }

  const std::string& kind() const override { return kind_; }
  const std::string& path() const override { return dir_; }
  const TableManifest& manifest() const override { return manifest_; }

  absl::Status ReadRows(int layer, uint64_t first, uint64_t n, uint8_t* out) const override {
    const LayerInfo& l = manifest_.layers.at(static_cast<size_t>(layer));
    if (first > l.rows || n > l.rows - first) {
      return absl::OutOfRangeError(absl::StrCat(dir_, ": rows [", first, ", ", first + n,
                                                ") of layer ", layer, " are outside the table"));
    }
    return ReadStoredRows(tensors_[static_cast<size_t>(layer)], l, first, n, out);
  }

  std::vector<std::string> UnservedTensors() const override { return unserved_; }

  std::vector<std::string> files() const override {
    std::vector<std::string> paths;
    for (const std::unique_ptr<OpenFile>& f : files_) paths.push_back(f->path);
    return paths;
  }

  absl::Status Open(const std::string& dir, uint64_t version);

 private:
  // The open file named `name` in the checkpoint directory (opened once).
  absl::StatusOr<const OpenFile*> File(const std::string& name);

  const std::string kind_ = "checkpoint";
  std::string dir_;
  TableManifest manifest_;
  std::vector<std::unique_ptr<OpenFile>> files_;  // File() hands out pointers
  std::vector<RowTensors> tensors_;               // per layer
  std::vector<std::string> unserved_;
};

absl::StatusOr<const OpenFile*> CheckpointSource::File(const std::string& name) {
  const std::string path = (fs::path(dir_) / name).string();
  for (const std::unique_ptr<OpenFile>& f : files_) {
    if (f->path == path) return f.get();
  }
  auto f = std::make_unique<OpenFile>();
  f->path = path;
  f->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) {
    const std::string msg =
        absl::StrCat("cannot open checkpoint file ", path, ": ", std::strerror(errno));
    return errno == ENOENT ? absl::NotFoundError(msg) : absl::InvalidArgumentError(msg);
  }
  absl::StatusOr<SafetensorsHeader> h = ReadSafetensorsHeader(f->fd, path);
  if (!h.ok()) {
    ::close(f->fd);
    return h.status();
  }
  f->header = *std::move(h);
  files_.push_back(std::move(f));
  return files_.back().get();
}

absl::Status CheckpointSource::Open(const std::string& dir, uint64_t version) {
  dir_ = dir;
  const std::string config_path = (fs::path(dir) / kCheckpointConfigFile).string();
  ASSIGN_OR_RETURN(std::string config_text, ReadBounded(config_path, kMaxSmallFileBytes));
  ASSIGN_OR_RETURN(EngramConfig config, ParseEngramConfig(config_text, config_path));

  const std::string tok_path = (fs::path(dir) / kCheckpointTokenizerFile).string();
  ASSIGN_OR_RETURN(std::string tok_text, ReadBounded(tok_path, kMaxTokenizerBytes));
  ASSIGN_OR_RETURN(TokenMap tokens, BuildTokenMap(tok_text, tok_path));
  if (tokens.compressed_vocab_size != config.compressed_vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        tok_path, " compresses to ", tokens.compressed_vocab_size, " normalised ids but ",
        config_path, " says engram_compressed_vocab_size ", config.compressed_vocab_size,
        "; the tokenizer is not the one this checkpoint was trained with"));
  }
  if (config.pad_token_id >= static_cast<int64_t>(tokens.token_map.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_path, ": engram_pad_token_id ", config.pad_token_id,
                     " is not a token of ", tok_path, " (", tokens.token_map.size(), " tokens)"));
  }
  const int64_t pad_id = tokens.token_map[static_cast<size_t>(config.pad_token_id)];
  absl::StatusOr<HashLayout> layout = DeriveHashLayout(config, std::move(tokens.token_map), pad_id);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": ", layout.status().message()));
  }

  // Which file holds each tensor: the index, or the one file.
  std::map<std::string, std::string, std::less<>> weight_map;
  const std::string index_path = (fs::path(dir) / kCheckpointIndexFile).string();
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    ASSIGN_OR_RETURN(std::string index_text, ReadBounded(index_path, kMaxSmallFileBytes));
    ASSIGN_OR_RETURN(weight_map, ParseSafetensorsIndex(index_text, index_path));
  } else {
    const std::string single = (fs::path(dir) / kCheckpointSingleFile).string();
    if (!fs::exists(single, ec)) {
      return absl::NotFoundError(absl::StrCat(dir, " holds neither ", kCheckpointIndexFile, " nor ",
                                              kCheckpointSingleFile,
                                              "; give the checkpoint's directory"));
    }
    ASSIGN_OR_RETURN(const OpenFile* f, File(kCheckpointSingleFile));
    for (const SafetensorsTensor& t : f->header.tensors) {
      weight_map[t.name] = kCheckpointSingleFile;
    }
  }

  manifest_.table = fs::path(dir).lexically_normal().filename().string();
  if (manifest_.table.empty()) manifest_.table = fs::path(dir).parent_path().filename().string();
  if (manifest_.table.empty()) manifest_.table = "checkpoint";
  manifest_.version = version == 0 ? 1 : version;
  manifest_.rows_file.clear();
  manifest_.source_kind = kind_;
  manifest_.source_path = dir;
  manifest_.layout = *std::move(layout);
  std::set<std::string> served;
  for (int l = 0; l < manifest_.layout.n_layers(); ++l) {
    LayerInfo& info = manifest_.layers.emplace_back();
    info.index = l;
    info.layer_id = manifest_.layout.engram_layer_ids[l];
    info.rows = static_cast<uint64_t>(manifest_.layout.table_rows[l]);
    info.encoding = RowEncoding::kFp8;
    info.head_dim = config.head_dim;
    info.weight_tensor = EngramWeightTensorName(info.layer_id);
    info.scale_tensor = EngramScaleTensorName(info.layer_id);
    served.insert(info.weight_tensor);
    served.insert(info.scale_tensor);
    const OpenFile* in[2];
    for (int k = 0; k < 2; ++k) {
      const std::string& name = k == 0 ? info.weight_tensor : info.scale_tensor;
      auto it = weight_map.find(name);
      if (it == weight_map.end()) {
        return absl::InvalidArgumentError(absl::StrCat(dir, ": the checkpoint has no tensor ", name,
                                                       " (Engram layer ", info.layer_id,
                                                       " of config.json's engram_layer_ids)"));
      }
      ASSIGN_OR_RETURN(in[k], File(it->second));
    }
    // The scale tensor's width gives the scale block.
    const SafetensorsTensor* scale = in[1]->header.Find(info.scale_tensor);
    if (scale == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(in[1]->path, ": no tensor ", info.scale_tensor,
                                                     " although ", kCheckpointIndexFile,
                                                     " places it there"));
    }
    const uint64_t scale_cols = scale->shape.size() == 2 ? scale->shape[1] : 0;
    if (scale_cols == 0 || static_cast<uint64_t>(info.head_dim) % scale_cols != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          in[1]->path, ": tensor ", info.scale_tensor, " must be [rows, head_dim / scale_block] ",
          "with engram_head_dim ", info.head_dim, " a multiple of its width"));
    }
    info.scale_block = info.head_dim / static_cast<int>(scale_cols);
    ASSIGN_OR_RETURN(info.row_bytes,
                     EncodedRowBytes(RowEncoding::kFp8, info.head_dim, info.scale_block));
    RowTensors t;
    t.weight_fd = in[0]->fd;
    t.scale_fd = in[1]->fd;
    t.path = in[0]->path;
    RETURN_IF_ERROR(LocateRowTensor(in[0]->header, in[0]->path, info, info.weight_tensor,
                                    kWeightDtype, &t.weight_offset));
    RETURN_IF_ERROR(LocateRowTensor(in[1]->header, in[1]->path, info, info.scale_tensor,
                                    kScaleDtype, &t.scale_offset));
    tensors_.push_back(t);
  }
  for (const auto& [name, file] : weight_map) {
    if (absl::StrContains(name, ".engram.") && !served.contains(name)) unserved_.push_back(name);
  }
  if (absl::Status v = manifest_.Validate(/*require_checksums=*/false); !v.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": ", v.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RowSource>> OpenCheckpointSource(const std::string& dir,
                                                                uint64_t version) {
  auto source = std::make_unique<CheckpointSource>();
  RETURN_IF_ERROR(source->Open(dir, version));
  return source;
}

}  // namespace engram
