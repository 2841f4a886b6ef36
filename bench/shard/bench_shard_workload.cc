#include "bench/shard/bench_shard_workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/hash/engram_hash.h"
#include "common/util/status_macros.h"
#include "shard/import/importer.h"

namespace engram::bench {
namespace {

namespace fs = std::filesystem;

constexpr double kTraceZipfExponent = 1.1;
// Seed of the rank -> token shuffle shared by every ZipfTokens.
constexpr uint64_t kRankShuffleSeed = 0x5eed;

std::string ParamsText(const BenchTableOptions& o) {
  return absl::StrCat("engram-bench-shard work dir, format 1\n", "preset v41, engram_vocab_size ",
                      o.engram_vocab_size, ", seed ", o.seed, ", 1 shard\n", "profile trace ",
                      o.trace_lines, " x ", o.trace_tokens, " tokens, zipf ", kTraceZipfExponent,
                      ", seed ", o.trace_seed, "\n");
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status WriteWholeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status WriteTrace(const BenchTableOptions& o, int64_t vocab_size, const std::string& path) {
  ZipfTokens tokens(vocab_size, kTraceZipfExponent, o.trace_seed);
  std::string text;
  for (int line = 0; line < o.trace_lines; ++line) {
    for (int t = 0; t < o.trace_tokens; ++t) {
      if (t > 0) text.push_back(' ');
      absl::StrAppend(&text, tokens.Next());
    }
    text.push_back('\n');
  }
  return WriteWholeFile(path, text);
}

void Progress(const char* what, uint64_t done, uint64_t total) {
  if (done == total) {
    std::fprintf(stderr, "  %s: %llu rows\n", what, static_cast<unsigned long long>(total));
  }
}

// Generates the table, writes the trace and imports both as shard 0 of 1.
absl::Status BuildWorkDir(const BenchTableOptions& o, const GenTableOptions& gen,
                          int64_t vocab_size) {
  const std::string shard_dir = o.work_dir + "/shard";
  const std::string trace = o.work_dir + "/profile_trace.txt";
  std::error_code ec;
  fs::remove(o.work_dir + "/params.txt", ec);
  fs::remove_all(gen.out_dir, ec);
  fs::remove_all(shard_dir, ec);
  fs::create_directories(o.work_dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create --work-dir ", o.work_dir, ": ", ec.message()));
  }
  std::fprintf(stderr, "bench-shard: building the work dir %s\n", o.work_dir.c_str());
  RETURN_IF_ERROR(GenerateTable(gen, [](uint64_t d, uint64_t t) { Progress("gen-table", d, t); }));
  RETURN_IF_ERROR(WriteTrace(o, vocab_size, trace));
  ImportOptions import;
  import.table_dir = gen.out_dir;
  import.n_shards = 1;
  import.shard_index = 0;
  import.out_dir = shard_dir;
  import.profile_trace = trace;
  ASSIGN_OR_RETURN(ImportResult imported,
                   ImportShard(import, [](uint64_t d, uint64_t t) { Progress("import", d, t); }));
  fs::remove_all(gen.out_dir, ec);  // the shard holds the rows now
  return WriteWholeFile(o.work_dir + "/params.txt", ParamsText(o));
}

}  // namespace

absl::StatusOr<BenchTable> PrepareBenchTable(const BenchTableOptions& o) {
  BenchTable table;
  table.shard_dir = o.work_dir + "/shard";
  table.gen.out_dir = o.work_dir + "/table";
  table.gen.preset = "v41";
  table.gen.engram_vocab_size = o.engram_vocab_size;
  table.gen.seed = o.seed;
  ASSIGN_OR_RETURN(HashLayout layout, BuildPresetLayout(table.gen));
  table.layout = std::move(layout);

  table.reused = ReadWholeFile(o.work_dir + "/params.txt") == ParamsText(o) &&
                 fs::exists(table.shard_dir + "/" + kShardMapFile);
  if (!table.reused) {
    RETURN_IF_ERROR(BuildWorkDir(o, table.gen, table.layout.vocab_size));
  }
  ASSIGN_OR_RETURN(ShardMap map, ShardMap::Load(table.shard_dir + "/" + kShardMapFile));
  table.map = std::move(map);
  for (size_t l = 0; l < table.map.layer_rows.size(); ++l) {
    table.shard_rows += table.map.layer_rows[l];
    table.shard_bytes += table.map.layer_rows[l] * table.map.row_bytes[l];
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(table.shard_dir + "/rocksdb", ec)) {
    if (entry.path().extension() == ".sst") {
      table.sst_files.push_back(entry.path().string());
    }
  }
  std::sort(table.sst_files.begin(), table.sst_files.end());
  if (table.sst_files.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        table.shard_dir, "/rocksdb holds no SST file; delete ", o.work_dir, " and run again"));
  }
  return table;
}

absl::StatusOr<RowArray> RowArray::Build(const BenchTable& table) {
  int head_dim = 0;
  int scale_block = 0;
  RETURN_IF_ERROR(ResolveGeometry(table.gen, &head_dim, &scale_block));
  const ShardMap& map = table.map;
  RowArray array;
  array.row_bytes_ = map.row_bytes.at(0);
  uint64_t rows = 0;
  for (size_t l = 0; l < map.layer_rows.size(); ++l) {
    if (map.row_bytes[l] != array.row_bytes_) {
      return absl::InvalidArgumentError("layers differ in row size");
    }
    array.layer_base_.push_back(rows);
    rows += map.layer_rows[l];
  }
  ASSIGN_OR_RETURN(HugePageBuffer data, HugePageBuffer::Allocate(rows * array.row_bytes_));
  array.data_ = std::move(data);
  std::vector<std::thread> threads;  // one per layer
  for (size_t l = 0; l < map.layer_rows.size(); ++l) {
    threads.emplace_back([&, l] {
      GenerateRows(table.gen.seed, static_cast<int>(l), 0, map.layer_rows[l], head_dim, scale_block,
                   array.data_.data() + array.layer_base_[l] * array.row_bytes_);
    });
  }
  for (std::thread& t : threads) t.join();
  return array;
}

ZipfTokens::ZipfTokens(int64_t vocab_size, double exponent, uint64_t seed)
    : cdf_(static_cast<size_t>(vocab_size)), token_(static_cast<size_t>(vocab_size)), rng_(seed) {
  double sum = 0;
  for (size_t r = 0; r < cdf_.size(); ++r) {
    sum += std::pow(static_cast<double>(r + 1), -exponent);
    cdf_[r] = sum;
  }
  std::iota(token_.begin(), token_.end(), int64_t{0});
  std::mt19937_64 shuffle(kRankShuffleSeed);
  std::shuffle(token_.begin(), token_.end(), shuffle);
}

int64_t ZipfTokens::Next() {
  std::uniform_real_distribution<double> u(0.0, cdf_.back());
  const size_t rank =
      static_cast<size_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u(rng_)) - cdf_.begin());
  return token_[std::min(rank, token_.size() - 1)];
}

absl::StatusOr<DecodeSteps> DecodeSteps::Generate(const HashLayout& layout,
                                                  const DecodeStepOptions& o) {
  if (o.batch < 1 || o.prefill < 1 || o.steps < 1 ||
      o.prefill + o.steps > SequenceState::kDefaultCapacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "decode steps: batch ", o.batch, ", prefill ", o.prefill, ", steps ", o.steps,
        " (need >= 1 each, prefill + steps <= ", SequenceState::kDefaultCapacity, ")"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<NgramHasher> hasher, NgramHasher::Create(layout));
  const NgramHasher& h = *hasher;
  const size_t B = static_cast<size_t>(o.batch);
  const size_t per_position = static_cast<size_t>(h.ids_per_position());
  const size_t n_cols = static_cast<size_t>(h.n_cols());

  std::vector<SequenceState> states(B);
  std::vector<SequenceState*> batch;
  for (SequenceState& s : states) batch.push_back(&s);
  ZipfTokens tokens(layout.vocab_size, o.zipf_exponent, o.seed);

  std::vector<int64_t> prefill(B * o.prefill);
  for (int64_t& t : prefill) t = tokens.Next();
  std::vector<RowId> prefill_out(prefill.size() * per_position);
  RETURN_IF_ERROR(h.HashBatch(batch, 0, o.prefill, prefill.data(), nullptr, prefill_out.data()));

  DecodeSteps steps;
  steps.n_steps_ = static_cast<size_t>(o.steps);
  steps.n_layers_ = h.n_layers();
  steps.ids_per_layer_ = B * n_cols;
  steps.ids_.resize(steps.n_steps_ * steps.ids_per_step());
  std::vector<int64_t> step_tokens(B);
  std::vector<RowId> out(B * per_position);  // [B][1][n_layers][n_cols]
  for (size_t s = 0; s < steps.n_steps_; ++s) {
    for (int64_t& t : step_tokens) t = tokens.Next();
    if (absl::Status st = h.HashBatch(batch, o.prefill + static_cast<int64_t>(s), 1,
                                      step_tokens.data(), nullptr, out.data());
        !st.ok()) {
      return st;
    }
    for (int l = 0; l < steps.n_layers_; ++l) {
      uint64_t* dst = steps.ids_.data() + (s * steps.n_layers_ + l) * steps.ids_per_layer_;
      for (size_t b = 0; b < B; ++b) {
        std::memcpy(dst + b * n_cols, out.data() + (b * steps.n_layers_ + l) * n_cols,
                    n_cols * sizeof(uint64_t));
      }
    }
  }

  const size_t sampled = std::min<size_t>(steps.n_steps_, 64);
  std::vector<uint64_t> scratch;
  double share = 0;
  for (size_t s = 0; s < sampled; ++s) {
    for (int l = 0; l < steps.n_layers_; ++l) {
      std::span<const uint64_t> ids = steps.Layer(s, l);
      scratch.assign(ids.begin(), ids.end());
      std::sort(scratch.begin(), scratch.end());
      const size_t distinct =
          static_cast<size_t>(std::unique(scratch.begin(), scratch.end()) - scratch.begin());
      share += static_cast<double>(distinct) / static_cast<double>(ids.size());
    }
  }
  steps.distinct_share_ = share / static_cast<double>(sampled * steps.n_layers_);
  return steps;
}

absl::Status CheckStepRows(const DecodeSteps& steps, size_t step, const RowArray& table,
                           std::span<const uint8_t> rows) {
  const size_t n = table.row_bytes();
  if (rows.size() != steps.ids_per_step() * n) {
    return absl::InternalError(
        absl::StrCat("got ", rows.size(), " row bytes, expected ", steps.ids_per_step() * n));
  }
  const uint8_t* got = rows.data();
  for (int l = 0; l < steps.n_layers(); ++l) {
    for (uint64_t id : steps.Layer(step, l)) {
      if (std::memcmp(got, table.row(static_cast<uint32_t>(l), id), n) != 0) {
        return absl::InternalError(
            absl::StrCat("step ", step, ": layer ", l, " row ", id, " has the wrong bytes"));
      }
      got += n;
    }
  }
  return absl::OkStatus();
}

}  // namespace engram::bench
