#include "tools/shard_commands.h"

#include <cstdio>
#include <filesystem>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/util/file_util.h"
#include "shard/footprint.h"
#include "shard/import/gguf.h"
#include "shard/import/importer.h"
#include "shard/import/row_source.h"
#include "tools/progress.h"

ABSL_DECLARE_FLAG(std::string, out);
ABSL_DECLARE_FLAG(uint64_t, table_version);
// import defaults are ImportOptions' (shard/import/importer.h).
static const engram::ImportOptions kImportDefaults;

ABSL_FLAG(std::string, table, kImportDefaults.table_dir,
          "import: the table directory to shard; verify: the table to compare every row with");
ABSL_FLAG(std::string, gguf, kImportDefaults.gguf_path,
          "import, manifest: a DeepSeek-V4.1 GGUF file (or any split of a split set)");
ABSL_FLAG(std::string, checkpoint, kImportDefaults.checkpoint_dir,
          "import, manifest: a DeepSeek-V4.1 safetensors checkpoint directory (config.json, "
          "model.safetensors.index.json or model.safetensors, tokenizer.json)");
ABSL_FLAG(std::string, shards, "",
          "import, shardmap: the number of shards K; lookup, info: the shard addresses, "
          "shard 0 first, comma-separated, replicas of one shard joined by '|'");
ABSL_FLAG(std::string, tail_format, engram::TailFormatName(kImportDefaults.tail_format),
          "import: how the rows are stored: block (block-based tables; any size, works "
          "with engram-shard --direct-io) or cuckoo (CuckooTables read through mmap, "
          "~5x less CPU a row when the page cache holds the tail)");
ABSL_FLAG(int32_t, shard_index, -1, "import: which shard to build, 0..shards-1");
ABSL_FLAG(std::string, profile_trace, kImportDefaults.profile_trace,
          "import: token trace (one sequence per line) for the hot-row profile");
ABSL_FLAG(std::string, from_gguf, "", "layout: the GGUF file to read the hash layout from");

namespace engram {
namespace {

int Fail(const std::string& line) {
  std::fprintf(stderr, "engramctl: %s\n", line.c_str());
  return 2;
}

// "layer 1: q2_k 84 B/row, layer 14: ..." of a shard or a table.
std::string DescribeLayers(const ShardInfo& info) {
  std::vector<std::string> parts;
  for (const ShardInfo::Layer& l : info.layers) {
    parts.push_back(absl::StrCat("layer ", l.layer_id, " ", RowEncodingName(l.encoding), " ",
                                 l.rows_owned, " rows"));
  }
  return absl::StrJoin(parts, ", ");
}
std::string DescribeLayers(const TableManifest& m) {
  std::vector<std::string> parts;
  for (const LayerInfo& l : m.layers) {
    parts.push_back(absl::StrCat("layer ", l.layer_id, " ", RowEncodingName(l.encoding), " ",
                                 l.rows, " rows of ", l.row_bytes, " B"));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

int ImportCommand(const std::vector<std::string>& args) {
  if (!args.empty()) return Fail("import takes flags only, not '" + args[0] + "'");
  ImportOptions o;
  o.table_dir = absl::GetFlag(FLAGS_table);
  o.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint);
  o.gguf_path = absl::GetFlag(FLAGS_gguf);
  o.out_dir = absl::GetFlag(FLAGS_out);
  o.profile_trace = absl::GetFlag(FLAGS_profile_trace);
  o.version = absl::GetFlag(FLAGS_table_version);
  int32_t shards = 0;
  if (!absl::SimpleAtoi(absl::GetFlag(FLAGS_shards), &shards)) shards = 0;
  const int32_t index = absl::GetFlag(FLAGS_shard_index);
  if (!o.table_dir.empty() + !o.checkpoint_dir.empty() + !o.gguf_path.empty() != 1) {
    return Fail("import needs exactly one source: --table DIR, --checkpoint DIR or --gguf FILE");
  }
  if (shards < 1) return Fail("import needs --shards K (K >= 1, the number of shard servers)");
  if (index < 0 || index >= shards) {
    return Fail(
        absl::StrCat("import needs --shard-index I with 0 <= I < ", shards, " (got ", index, ")"));
  }
  if (o.out_dir.empty()) return Fail("import needs --out DIR (the shard directory to create)");
  absl::StatusOr<TailFormat> tail = ParseTailFormat(absl::GetFlag(FLAGS_tail_format));
  if (!tail.ok()) return Fail(absl::StrCat("import: --tail-format: ", tail.status().message()));
  o.tail_format = *tail;
  o.n_shards = static_cast<uint32_t>(shards);
  o.shard_index = static_cast<uint32_t>(index);

  ProgressBar bar(absl::StrCat("import shard ", index));
  absl::StatusOr<ImportResult> r =
      ImportShard(o, [&bar](uint64_t done, uint64_t total) { bar.Update(done, total); });
  bar.Finish();
  if (!r.ok()) return Fail(absl::StrCat("import: ", r.status().message()));
  const std::string what = absl::StrCat("shard ", index, " of ", shards, " of table ", r->map.table,
                                        " v", r->map.version);
  if (r->already_imported) {
    std::printf("import: already imported: %s holds %s\n", o.out_dir.c_str(), what.c_str());
    return 0;
  }
  std::printf(
      "import: wrote %s to %s (%llu rows, %d SST files, %s tail%s)\n", what.c_str(),
      o.out_dir.c_str(), static_cast<unsigned long long>(r->rows_written), r->sst_files,
      TailFormatName(o.tail_format),
      o.profile_trace.empty() ? "" : absl::StrCat(", ", r->profile_rows, " profiled rows").c_str());
  std::printf("import: layers: %s\n", DescribeLayers(r->info).c_str());
  if (!r->unserved_tensors.empty()) {
    std::printf("import: not served (other Engram tensors of the source): %s\n",
                absl::StrJoin(r->unserved_tensors, ", ").c_str());
  }
  return 0;
}

int ManifestCommand(const std::vector<std::string>& args) {
  if (!args.empty()) return Fail("manifest takes flags only, not '" + args[0] + "'");
  SourceSpec spec;
  spec.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint);
  spec.gguf_path = absl::GetFlag(FLAGS_gguf);
  spec.version = absl::GetFlag(FLAGS_table_version);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (spec.checkpoint_dir.empty() == spec.gguf_path.empty()) {
    return Fail("manifest needs exactly one source: --checkpoint DIR or --gguf FILE");
  }
  if (out.empty()) {
    return Fail("manifest needs --out TABLE_DIR (the table directory workers read)");
  }
  absl::StatusOr<std::unique_ptr<RowSource>> src = RowSource::Open(spec);
  if (!src.ok()) return Fail(absl::StrCat("manifest: ", src.status().message()));
  ProgressBar bar("manifest: checksums");
  absl::StatusOr<std::vector<std::string>> sums = StreamSource(
      **src, 4096, [&bar](uint64_t done, uint64_t total) { bar.Update(done, total); }, nullptr);
  bar.Finish();
  if (!sums.ok()) return Fail(absl::StrCat("manifest: ", sums.status().message()));
  const TableManifest m = ManifestOnly(**src, *sums);
  if (absl::StatusOr<TableManifest> old = TableManifest::Load(out); old.ok()) {
    if (old->ToJson() == m.ToJson()) {
      std::printf("manifest: already written: %s/%s\n", out.c_str(), kManifestFile);
      return 0;
    }
    return Fail(absl::StrCat("manifest: ", out, " already holds another table's manifest (",
                             old->table, " v", old->version, "); pick another --out or delete it"));
  }
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (absl::Status s = m.Save(out); !s.ok()) return Fail(absl::StrCat("manifest: ", s.message()));
  std::printf("manifest: wrote %s/%s for table %s v%llu from %s %s (%s), source checksum %s\n",
              out.c_str(), kManifestFile, m.table.c_str(),
              static_cast<unsigned long long>(m.version), m.source_kind.c_str(),
              m.source_path.c_str(), DescribeLayers(m).c_str(), m.source_checksum().c_str());
  return 0;
}

int LayoutCommand(const std::vector<std::string>& args) {
  if (!args.empty()) return Fail("layout takes flags only, not '" + args[0] + "'");
  const std::string gguf = absl::GetFlag(FLAGS_from_gguf);
  if (gguf.empty()) return Fail("layout needs --from-gguf FILE (a DeepSeek-V4.1 GGUF)");
  absl::StatusOr<std::unique_ptr<GgufEngramFile>> f = GgufEngramFile::Open(gguf);
  if (!f.ok()) return Fail(absl::StrCat("layout: ", f.status().message()));
  const std::string json = (*f)->layout().ToJson() + "\n";
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::fwrite(json.data(), 1, json.size(), stdout);
    return 0;
  }
  if (absl::Status s = WriteFileAtomically(out, json); !s.ok()) {
    return Fail(absl::StrCat("layout: ", s.message()));
  }
  std::fprintf(stderr, "layout: wrote %s\n", out.c_str());
  return 0;
}

int FootprintCommand(const std::vector<std::string>& args) {
  if (args.empty()) return Fail("footprint needs one or more shard directories (from import)");
  for (const std::string& dir : args) {
    absl::StatusOr<ShardFootprint> f = MeasureShardFootprint(dir, /*direct_io=*/true);
    if (!f.ok()) return Fail(absl::StrCat("footprint: ", f.status().message()));
    std::printf("footprint: %s fixed_bytes=%llu whole_shard_budget=%llu\n", dir.c_str(),
                static_cast<unsigned long long>(f->fixed_bytes),
                static_cast<unsigned long long>(f->whole_shard_budget()));
  }
  return 0;
}

}  // namespace engram
