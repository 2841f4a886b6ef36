// Engram table files.
//
// A table is a directory holding `manifest.json` and the rows as a
// safetensors file (normally `rows.safetensors`). Per Engram layer L (the
// transformer layer id) the file has tensors
//   layers.L.engram.embed.weight  F8_E4M3  [rows, head_dim]
//   layers.L.engram.embed.scale   F8_E8M0  [rows, head_dim / scale_block]
// and may hold any other tensors (a real checkpoint shard reads the same
// way). A *stored row* is the row's head_dim weight bytes followed by its
// scale bytes (row_bytes in total); layer checksums are XXH3-64 over the
// stored rows in row order, written "xxh3_64:<16 lowercase hex digits>".
#ifndef ENGRAM_COMMON_FORMAT_TABLE_H_
#define ENGRAM_COMMON_FORMAT_TABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/codec/row_encoding.h"
#include "common/format/safetensors.h"
#include "common/hash/layout.h"

namespace engram {

inline constexpr char kTableFormat[] = "engram-table";
inline constexpr int kTableFormatVersion = 1;
inline constexpr char kManifestFile[] = "manifest.json";
inline constexpr char kDefaultRowsFile[] = "rows.safetensors";
inline constexpr char kWeightDtype[] = "F8_E4M3";
// A layer of another encoding is one tensor of its stored rows as bytes,
// [rows, row_bytes].
inline constexpr char kRowsDtype[] = "U8";
inline constexpr char kScaleDtype[] = "F8_E8M0";

// Checkpoint tensor names of Engram layer `layer_id`:
// "layers.<id>.engram.embed.weight" and "layers.<id>.engram.embed.scale".
std::string EngramWeightTensorName(int64_t layer_id);
std::string EngramScaleTensorName(int64_t layer_id);

// Formats a checksum value as "xxh3_64:<16 hex>".
std::string FormatChecksum(uint64_t xxh3);

// A table's source checksum: FormatChecksum of XXH3-64 over its per-layer
// checksums in layer order, each followed by "\n". What `engramctl import`
// records in shard.json and what Lookups carry, so a worker and a shard
// agree they hold the same rows.
std::string SourceChecksum(const std::vector<std::string>& layer_checksums);

// One Engram layer's table. A plain value type.
struct LayerInfo {
  int index = 0;         // position in TableManifest::layers and the layout
  int64_t layer_id = 0;  // transformer layer (layout.engram_layer_ids[index])
  uint64_t rows = 0;     // == layout.table_rows[index]
  // How a stored row encodes its head_dim values (common/codec/row_encoding.h);
  // "encoding" in manifest.json, absent = e4m3_e8m0.
  RowEncoding encoding = RowEncoding::kFp8;
  int head_dim = 0;     // values per row
  int scale_block = 0;  // kFp8: values per e8m0 scale (head_dim % scale_block == 0); else 0
  int row_bytes = 0;    // EncodedRowBytes(encoding, head_dim, scale_block)
  // The source's tensor(s) of the layer: kFp8 the weight and scale tensors
  // of a checkpoint or rows file; other encodings the GGUF tensor, and no
  // scale tensor.
  std::string weight_tensor, scale_tensor;
  std::string checksum;  // "xxh3_64:<16 hex>"; empty before writing

  int scale_bytes() const { return row_bytes - head_dim; }  // kFp8 only
};

// The manifest of a table. A plain value type.
struct TableManifest {
  std::string table;
  uint64_t version = 0;
  // Relative to the table dir. Empty in a manifest-only table directory
  // (`engramctl manifest`): the layout, geometry and checksums a worker
  // needs, the rows staying in the source named below.
  std::string rows_file = kDefaultRowsFile;
  // Informational: the file(s) the table was described from, "checkpoint"
  // or "gguf" and a path; empty for a table written with its rows.
  std::string source_kind, source_path;
  HashLayout layout;
  std::vector<LayerInfo> layers;

  // A manifest (without checksums) for `layout` with every layer using the
  // same encoding, head_dim and scale_block (kFp8 only; 0 for the others)
  // and the standard tensor names (a scale tensor for kFp8 only).
  static absl::StatusOr<TableManifest> ForLayout(std::string table, uint64_t version,
                                                 HashLayout layout, int head_dim, int scale_block,
                                                 RowEncoding encoding = RowEncoding::kFp8);

  // Reads and validates <table_dir>/manifest.json (NotFound if absent,
  // InvalidArgument naming the problem otherwise).
  static absl::StatusOr<TableManifest> Load(const std::string& table_dir);
  // Parses manifest JSON text (nested at most kMaxJsonDepth deep) and
  // validates it (checksums required).
  static absl::StatusOr<TableManifest> FromJson(std::string_view text);

  // Validates the layout and the layers against it: one layer per layout
  // layer, index/layer_id/rows matching the layout, encoding/head_dim/
  // scale_block/row_bytes consistent (computed without int overflow), the
  // layers' rows summing within 64 bits, tensor names non-empty (a scale
  // tensor for kFp8 only), rows_file empty or a plain relative path, and a
  // table with a rows file holding kFp8 layers only (the rows file format).
  // With require_checksums, every checksum must be well-formed.
  absl::Status Validate(bool require_checksums) const;

  // Writes <table_dir>/manifest.json atomically (temp file, fsync, rename).
  absl::Status Save(const std::string& table_dir) const;
  // The manifest JSON document (pretty-printed, the layout on one line).
  std::string ToJson() const;

  uint64_t total_rows() const;
  // SourceChecksum of the layers' checksums: what the shards imported from
  // this table hold in shard.json.
  std::string source_checksum() const;
};

// Where one layer's stored rows lie in safetensors file(s): for kFp8 the
// weight tensor [rows, head_dim] (F8_E4M3) and the scale tensor [rows,
// head_dim / scale_block] (F8_E8M0), for another encoding the weight fields
// only (its kRowsDtype tensor); each at an absolute offset of an open file
// (the same file or two). A plain value; the caller owns the descriptors.
struct RowTensors {
  int weight_fd = -1;
  uint64_t weight_offset = 0;
  int scale_fd = -1;
  uint64_t scale_offset = 0;
  std::string path;  // for messages
};

// Finds tensor `name` of layer `l` in `header` (of the file at `path`),
// checks its dtype (kWeightDtype, kScaleDtype or kRowsDtype) and its shape
// ([rows, head_dim], [rows, scale_bytes()] or [rows, row_bytes]), and gives
// its absolute offset.
// NotFound or InvalidArgument naming the file, tensor and layer.
absl::Status LocateRowTensor(const SafetensorsHeader& header, const std::string& path,
                             const LayerInfo& l, const std::string& name, std::string_view dtype,
                             uint64_t* offset);

// Reads stored rows [first, first + n) of layer `l` into out[n *
// l.row_bytes]: each row's weight bytes then its scale bytes, or for a
// layer of another encoding its kRowsDtype tensor's bytes (pread only;
// thread-safe). REQUIRES: the rows lie inside the layer.
absl::Status ReadStoredRows(const RowTensors& tensors, const LayerInfo& l, uint64_t first,
                            uint64_t n, uint8_t* out);

// Read-only access to a table's rows. Thread-safe: any number of threads may
// call the const methods concurrently (they use pread only).
class TableReader {
 public:
  // Loads the manifest, opens the rows file and checks its safetensors
  // header against the manifest: each layer's weight/scale tensor exists with
  // the right dtype and shape, and lies inside the file. Errors name the file
  // and tensor: NotFound (no manifest / rows file), DataLoss (truncated
  // file), InvalidArgument (mismatch), FailedPrecondition for a
  // manifest-only directory (naming the source to import from instead).
  static absl::StatusOr<std::unique_ptr<TableReader>> Open(const std::string& table_dir);
  ~TableReader();
  TableReader(const TableReader&) = delete;
  TableReader& operator=(const TableReader&) = delete;

  const TableManifest& manifest() const { return manifest_; }
  const std::string& rows_path() const { return rows_path_; }
  const SafetensorsHeader& safetensors_header() const { return header_; }

  // Copies stored rows [first, first + n) of layer `layer` (an index into
  // manifest().layers) into out[n * row_bytes]: each row its weight bytes
  // then its scale bytes. OutOfRange if the layer or rows are out of bounds.
  absl::Status ReadRows(int layer, uint64_t first, uint64_t n, uint8_t* out) const;
  absl::Status ReadRow(int layer, uint64_t row, uint8_t* out) const {
    return ReadRows(layer, row, 1, out);
  }

  // Recomputes every layer's checksum by streaming its rows and compares it
  // with the manifest; DataLoss naming the layer on a mismatch. If given,
  // progress(done_rows, total_rows) is called after each chunk (all layers).
  absl::Status VerifyChecksums(
      const std::function<void(uint64_t done, uint64_t total)>& progress = nullptr) const;

 private:
  TableReader() = default;

  TableManifest manifest_;
  std::string rows_path_;
  SafetensorsHeader header_;
  std::vector<RowTensors> tensors_;  // per layer, both in fd_
  int fd_ = -1;
};

// Writes a table without holding it in memory: the caller supplies rows in
// chunks; the writer pwrite()s the weight and scale parts into their tensor
// regions and accumulates checksums. Finish() writes manifest.json last and
// atomically, so a failed run never leaves a manifest pointing at a partial
// rows file. Not thread-safe; use from one thread.
class TableWriter {
 public:
  // Creates table_dir if needed, removes any old manifest.json, creates the
  // rows file (sized to its final length) and writes its header. The
  // manifest's checksums are ignored; empty tensor names get the standard
  // names, row_bytes 0 is computed, index is set to the layer's position.
  static absl::StatusOr<std::unique_ptr<TableWriter>> Create(
      const std::string& table_dir, TableManifest manifest_without_checksums);
  ~TableWriter();
  TableWriter(const TableWriter&) = delete;
  TableWriter& operator=(const TableWriter&) = delete;

  // Appends n stored rows (n * row_bytes bytes, weight then scale per row) to
  // layer `layer`. Each layer's rows arrive in order; layers may be
  // interleaved. OutOfRange past the layer's row count.
  absl::Status AppendRows(int layer, const uint8_t* rows, uint64_t n);

  // REQUIRES: every layer complete (else FailedPrecondition). Syncs the rows
  // file, fills in the checksums and writes the manifest.
  absl::Status Finish();

  // The manifest; after Finish() it holds the checksums.
  const TableManifest& manifest() const { return manifest_; }

 private:
  struct LayerState;
  TableWriter();

  std::string dir_;
  TableManifest manifest_;
  int fd_ = -1;
  bool finished_ = false;
  std::vector<std::unique_ptr<LayerState>> layers_;
  std::vector<uint8_t> weight_buf_, scale_buf_;
};

}  // namespace engram

#endif  // ENGRAM_COMMON_FORMAT_TABLE_H_
