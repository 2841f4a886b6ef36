#include "bench/engram_bench/engram_bench_tables.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/format/table.h"
#include "common/gen/table_gen.h"
#include "common/util/status_macros.h"

namespace engram::bench {

absl::StatusOr<std::unique_ptr<BenchData>> PrepareBenchData(const BenchEnv& env,
                                                            const TableSpec& spec) {
  WorkloadOptions wo;
  wo.work_dir = env.work_dir;
  wo.trace = spec.trace;
  wo.token_map = spec.token_map;
  wo.demo_dir = env.build_dir + "/demo";
  wo.source_dir = env.source_dir;
  wo.engram_vocab_size = spec.vocab;
  wo.preset = spec.preset;
  ASSIGN_OR_RETURN(Workload workload, PrepareWorkload(wo));
  auto d = std::make_unique<BenchData>();
  d->workload = std::move(workload);
  // Block tails: the on-disk configurations read them with O_DIRECT.
  ASSIGN_OR_RETURN(std::vector<std::string> one, PrepareShards(d->workload, 1, TailFormat::kBlock));
  d->one_shard = std::move(one);
  if (spec.three_shards) {
    ASSIGN_OR_RETURN(std::vector<std::string> three,
                     PrepareShards(d->workload, 3, TailFormat::kBlock));
    d->three_shards = std::move(three);
  }

  absl::StatusOr<ShardMap> map = ShardMap::Load(d->one_shard[0] + "/shard_map.json");
  if (!map.ok()) return map.status();
  d->map = *std::move(map);
  for (size_t l = 0; l < d->map.layer_rows.size(); ++l) {
    d->table_rows += d->map.layer_rows[l];
    d->table_bytes += d->map.layer_rows[l] * d->map.row_bytes[l];
  }
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(d->one_shard[0] + "/rocksdb", ec)) {
    if (e.path().extension() == ".sst") d->sst_files.push_back(e.path().string());
  }
  std::sort(d->sst_files.begin(), d->sst_files.end());

  ASSIGN_OR_RETURN(TableManifest manifest, TableManifest::Load(d->workload.table_dir));
  ASSIGN_OR_RETURN(std::unique_ptr<NgramHasher> hasher, NgramHasher::Create(manifest.layout));
  d->hasher = std::move(hasher);
  ASSIGN_OR_RETURN(TokenTrace trace, TokenTrace::Load(d->workload.workload_trace));
  d->trace = std::move(trace);

  // The rows regenerate from the generator's seed (as GenerateTable wrote
  // them); RowArray::Build reads only the geometry and the shard map.
  BenchTable table;
  table.gen.preset = spec.preset;
  table.gen.engram_vocab_size = spec.vocab;
  table.map = d->map;
  ASSIGN_OR_RETURN(RowArray rows, RowArray::Build(table));
  d->rows = std::move(rows);
  return d;
}

absl::Status WriteZipfTrace(const std::string& path, int lines, int tokens, double exponent,
                            uint64_t seed) {
  ZipfTokens zipf(kPresetVocabSize, exponent, seed);
  std::ofstream out(path, std::ios::trunc);
  for (int line = 0; line < lines; ++line) {
    for (int t = 0; t < tokens; ++t) out << (t > 0 ? " " : "") << zipf.Next();
    out << '\n';
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace engram::bench
