// The rows of an Engram table as a published or generated file holds them.
//
// Three kinds of source, each read in place (pread of the Engram tensors
// only, streaming, never another tensor) and served in the encoding it
// stores:
//   "table"       a table directory: manifest.json + rows.safetensors
//                 (engramctl gen-table; common/format/table.h)
//   "checkpoint"  an official safetensors checkpoint directory: config.json,
//                 model.safetensors.index.json or a single
//                 model.safetensors, tokenizer.json; the hash layout is
//                 derived as every consumer derives it (shard/import/checkpoint_config.h,
//                 shard/import/token_map.h)
//   "gguf"        a DeepSeek-V4.1 GGUF file, or any split of a split set,
//                 of any published family (shard/import/gguf.h)
// docs/table-format.md, "Source files", lists what each holds.
#ifndef ENGRAM_SHARD_IMPORT_ROW_SOURCE_H_
#define ENGRAM_SHARD_IMPORT_ROW_SOURCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/format/table.h"

namespace engram {

// Which source to open: exactly one of the three paths.
struct SourceSpec {
  std::string table_dir;
  std::string checkpoint_dir;
  std::string gguf_path;
  // The table version of a checkpoint or GGUF (a table directory carries its
  // own). 0 = 1.
  uint64_t version = 0;
};

// An open source. Immutable after Open; ReadRows may be called from many
// threads.
class RowSource {
 public:
  // Opens and checks the source: its layout, every Engram tensor's dtype,
  // shape and extent. One-line errors naming the file and what is wrong:
  // NotFound for a missing file, DataLoss for a truncated one,
  // InvalidArgument otherwise.
  static absl::StatusOr<std::unique_ptr<RowSource>> Open(const SourceSpec& spec);
  virtual ~RowSource() = default;

  // "table", "checkpoint" or "gguf", and the path given.
  virtual const std::string& kind() const = 0;
  virtual const std::string& path() const = 0;

  // The table as the source describes it: name, version, layout and each
  // layer's encoding and geometry. Its checksums are the source's own
  // (a table directory's manifest) or empty (checkpoints and GGUF files
  // carry none: ComputeChecksums makes them).
  virtual const TableManifest& manifest() const = 0;

  // Copies stored rows [first, first + n) of layer `layer` into
  // out[n * manifest().layers[layer].row_bytes]. OutOfRange outside the
  // layer; DataLoss on a short read.
  virtual absl::Status ReadRows(int layer, uint64_t first, uint64_t n, uint8_t* out) const = 0;

  // Engram tensors the source holds that are not served (a checkpoint's
  // engram.wkv.*, engram.q_weight, ...), for the import's summary.
  virtual std::vector<std::string> UnservedTensors() const { return {}; }

  // Every file the rows are read from: the splits of a GGUF, the
  // checkpoint's safetensors files that hold Engram tables.
  virtual std::vector<std::string> files() const { return {path()}; }
};

// progress(done, total) counts source rows read (all layers); may be empty.
using SourceProgress = std::function<void(uint64_t done, uint64_t total)>;

// Streams every layer of `source` once in chunks of `chunk_rows`, calling
// sink(layer, first_row, n, rows) for each chunk (sink may be empty), and
// returns each layer's checksum (FormatChecksum of XXH3-64 over its stored
// rows in row order). When the source has checksums of its own, a layer
// that differs is DataLoss naming it.
using ChunkSink =
    std::function<absl::Status(int layer, uint64_t first, uint64_t n, const uint8_t* rows)>;
absl::StatusOr<std::vector<std::string>> StreamSource(const RowSource& source, uint64_t chunk_rows,
                                                      const SourceProgress& progress,
                                                      const ChunkSink& sink);

// The manifest of a manifest-only table directory for `source`: its
// manifest with `checksums` filled in, no rows file, and the source named.
// REQUIRES: one checksum per layer.
TableManifest ManifestOnly(const RowSource& source, const std::vector<std::string>& checksums);

}  // namespace engram

#endif  // ENGRAM_SHARD_IMPORT_ROW_SOURCE_H_
