#include "shard/import/row_source.h"

#include <xxhash.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"
#include "shard/import/checkpoint_source.h"
#include "shard/import/gguf.h"

namespace engram {
namespace {

// A table directory (manifest.json + rows.safetensors).
class TableSource : public RowSource {
 public:
  TableSource(std::string dir, std::unique_ptr<TableReader> reader)
      : dir_(std::move(dir)), reader_(std::move(reader)) {}

  const std::string& kind() const override { return kind_; }
  const std::string& path() const override { return dir_; }
  const TableManifest& manifest() const override { return reader_->manifest(); }
  absl::Status ReadRows(int layer, uint64_t first, uint64_t n, uint8_t* out) const override {
    return reader_->ReadRows(layer, first, n, out);
  }
  std::vector<std::string> files() const override { return {reader_->rows_path()}; }

 private:
  const std::string kind_ = "table";
  std::string dir_;
  std::unique_ptr<TableReader> reader_;
};

// A DeepSeek-V4.1 GGUF file or split set.
class GgufSource : public RowSource {
 public:
  static absl::StatusOr<std::unique_ptr<RowSource>> Open(const std::string& path,
                                                         uint64_t version) {
    ASSIGN_OR_RETURN(std::unique_ptr<GgufEngramFile> file, GgufEngramFile::Open(path));
    std::unique_ptr<GgufSource> s(new GgufSource(path, std::move(file)));
    TableManifest& m = s->manifest_;
    const GgufEngramFile& g = *s->file_;
    m.table = g.name();
    m.version = version == 0 ? 1 : version;
    m.rows_file.clear();
    m.source_kind = s->kind_;
    m.source_path = path;
    m.layout = g.layout();
    for (int l = 0; l < g.n_layers(); ++l) {
      LayerInfo& info = m.layers.emplace_back();
      info.index = l;
      info.layer_id = m.layout.engram_layer_ids[l];
      info.rows = g.rows(l);
      info.encoding = g.encoding(l);
      info.head_dim = g.head_dim(l);
      info.scale_block = g.scale_block(l);
      info.row_bytes = g.row_bytes(l);
      info.weight_tensor = absl::StrCat("blk.", info.layer_id, ".engram_embd.weight");
    }
    if (absl::Status v = m.Validate(/*require_checksums=*/false); !v.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", v.message()));
    }
    return s;
  }

  const std::string& kind() const override { return kind_; }
  const std::string& path() const override { return path_; }
  const TableManifest& manifest() const override { return manifest_; }
  absl::Status ReadRows(int layer, uint64_t first, uint64_t n, uint8_t* out) const override {
    return file_->ReadRows(layer, first, n, out);
  }
  std::vector<std::string> files() const override { return file_->files(); }

 private:
  GgufSource(std::string path, std::unique_ptr<GgufEngramFile> file)
      : path_(std::move(path)), file_(std::move(file)) {}

  const std::string kind_ = "gguf";
  std::string path_;
  std::unique_ptr<GgufEngramFile> file_;
  TableManifest manifest_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RowSource>> RowSource::Open(const SourceSpec& spec) {
  const int given =
      !spec.table_dir.empty() + !spec.checkpoint_dir.empty() + !spec.gguf_path.empty();
  if (given != 1) {
    return absl::InvalidArgumentError(
        "give exactly one source: --table DIR, --checkpoint DIR or --gguf FILE");
  }
  if (!spec.table_dir.empty()) {
    ASSIGN_OR_RETURN(std::unique_ptr<TableReader> r, TableReader::Open(spec.table_dir));
    return std::make_unique<TableSource>(spec.table_dir, std::move(r));
  }
  if (!spec.gguf_path.empty()) return GgufSource::Open(spec.gguf_path, spec.version);
  return OpenCheckpointSource(spec.checkpoint_dir, spec.version);
}

absl::StatusOr<std::vector<std::string>> StreamSource(const RowSource& source, uint64_t chunk_rows,
                                                      const SourceProgress& progress,
                                                      const ChunkSink& sink) {
  const TableManifest& m = source.manifest();
  const uint64_t total = m.total_rows();
  uint64_t done = 0;
  std::vector<uint8_t> buf;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), &XXH3_freeState);
  std::vector<std::string> sums;
  for (const LayerInfo& l : m.layers) {
    const uint64_t rb = static_cast<uint64_t>(l.row_bytes);
    buf.resize(chunk_rows * rb);
    XXH3_64bits_reset(st.get());
    for (uint64_t first = 0; first < l.rows; first += chunk_rows) {
      const uint64_t n = std::min(chunk_rows, l.rows - first);
      RETURN_IF_ERROR(source.ReadRows(l.index, first, n, buf.data()));
      XXH3_64bits_update(st.get(), buf.data(), n * rb);
      if (sink) RETURN_IF_ERROR(sink(l.index, first, n, buf.data()));
      done += n;
      if (progress) progress(done, total);
    }
    std::string got = FormatChecksum(XXH3_64bits_digest(st.get()));
    if (!l.checksum.empty() && got != l.checksum) {
      return absl::DataLossError(absl::StrCat(
          source.path(), ": rows of layer ", l.index, " (layer id ", l.layer_id, ") have checksum ",
          got, " but the manifest says ", l.checksum, "; the table is corrupt, copy it again"));
    }
    sums.push_back(std::move(got));
  }
  return sums;
}

TableManifest ManifestOnly(const RowSource& source, const std::vector<std::string>& checksums) {
  TableManifest m = source.manifest();
  m.rows_file.clear();
  m.source_kind = source.kind();
  m.source_path = source.path();
  for (size_t l = 0; l < m.layers.size(); ++l) m.layers[l].checksum = checksums[l];
  return m;
}

}  // namespace engram
