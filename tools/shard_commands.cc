#include "tools/shard_commands.h"

#include <cstdio>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "shard/footprint.h"
#include "shard/gguf.h"
#include "shard/importer.h"
#include "tools/progress.h"

ABSL_DECLARE_FLAG(std::string, out);
ABSL_DECLARE_FLAG(uint64_t, table_version);
// import defaults are ImportOptions' (shard/importer.h).
static const engram::ImportOptions kImportDefaults;

ABSL_FLAG(std::string, table, kImportDefaults.table_dir,
          "import: the table directory to shard; verify: the table to compare every row with");
ABSL_FLAG(std::string, gguf, kImportDefaults.gguf_path,
          "import: a DeepSeek-V4.1 GGUF file to shard instead of --table");
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

}  // namespace

int ImportCommand(const std::vector<std::string>& args) {
  if (!args.empty()) return Fail("import takes flags only, not '" + args[0] + "'");
  ImportOptions o;
  o.table_dir = absl::GetFlag(FLAGS_table);
  o.gguf_path = absl::GetFlag(FLAGS_gguf);
  o.out_dir = absl::GetFlag(FLAGS_out);
  o.profile_trace = absl::GetFlag(FLAGS_profile_trace);
  o.gguf_version = absl::GetFlag(FLAGS_table_version);
  int32_t shards = 0;
  if (!absl::SimpleAtoi(absl::GetFlag(FLAGS_shards), &shards)) shards = 0;
  const int32_t index = absl::GetFlag(FLAGS_shard_index);
  if (o.table_dir.empty() == o.gguf_path.empty()) {
    return Fail("import needs exactly one source: --table DIR or --gguf FILE");
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
