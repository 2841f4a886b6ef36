#include "bench/common/bench_client_setup.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/gen/table_gen.h"
#include "common/util/file_util.h"
#include "common/util/status_macros.h"
#include "service/testing/server_test_util.h"
#include "shard/import/importer.h"

namespace engram::bench {
namespace {

namespace fs = std::filesystem;

bool NonEmpty(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && fs::file_size(path, ec) > 0;
}

void Say(const std::string& line) { std::fprintf(stderr, "bench-client: %s\n", line.c_str()); }

// Runs a tool of the repository; OK only when it exits 0.
absl::Status RunTool(const std::vector<std::string>& argv, const std::string& log) {
  ASSIGN_OR_RETURN(int rc, testing::RunCommand(argv, "/dev/null", log));
  if (rc != 0) {
    return absl::InternalError(absl::StrCat(argv[0], " exited with ", rc, " (see ", log, ")"));
  }
  return absl::OkStatus();
}

absl::Status CopyFile(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::copy_file(from, to + ".tmp", fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(to + ".tmp", to, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot copy ", from, " to ", to, ": ", ec.message()));
  return absl::OkStatus();
}

// Fills trace / token_map / description of the default token source.
absl::Status DefaultTrace(const WorkloadOptions& o, std::string* trace, std::string* map,
                          std::string* description) {
  const std::string corpus = o.work_dir + "/corpus.trace";
  const std::string token_map = o.work_dir + "/token_map.json";
  if (!NonEmpty(corpus) || !NonEmpty(token_map)) {
    const std::string demo_corpus = o.demo_dir + "/corpus.trace";
    const std::string demo_map = o.demo_dir + "/token_map.json";
    if (!o.demo_dir.empty() && NonEmpty(demo_corpus) && NonEmpty(demo_map)) {
      Say("real-text trace from " + o.demo_dir);
      RETURN_IF_ERROR(CopyFile(demo_map, token_map));
      RETURN_IF_ERROR(CopyFile(demo_corpus, corpus));
    } else {
      Say("tokenising the default corpus (tools/make-trace, about a minute, once)");
      const std::string log = o.work_dir + "/make-trace.log";
      absl::Status s = RunTool({o.source_dir + "/tools/make-token-map", "--out", token_map}, log);
      if (s.ok()) {
        s = RunTool({o.source_dir + "/tools/make-trace", "--default-corpus", "--out", corpus}, log);
      }
      if (!s.ok()) {
        Say(absl::StrCat("no real-text trace (", s.message(), "); using a Zipf trace"));
        const std::string zipf = o.work_dir + "/zipf.trace";
        if (!NonEmpty(zipf)) {
          RETURN_IF_ERROR(RunTool({o.source_dir + "/tools/make-zipf-trace", "--out", zipf,
                                   "--sequences", "1024", "--length", "2048"},
                                  o.work_dir + "/make-zipf-trace.log"));
        }
        *trace = zipf;
        map->clear();
        *description = "Zipf(1.1) token trace (tools/make-zipf-trace)";
        return absl::OkStatus();
      }
    }
  }
  *trace = corpus;
  *map = token_map;
  *description = "real English text (tools/make-trace --default-corpus)";
  return absl::OkStatus();
}

// Odd lines (1st, 3rd, ...) to `odd`, even lines to `even`.
absl::Status SplitTrace(const std::string& path, const std::string& odd, const std::string& even) {
  std::ifstream in(path);
  std::ofstream a(odd), b(even);
  if (!in || !a || !b) return absl::InternalError("cannot split trace " + path);
  std::string line;
  for (uint64_t n = 1; std::getline(in, line); ++n) (n % 2 == 1 ? a : b) << line << '\n';
  a.close();
  b.close();
  if (!a || !b) return absl::InternalError("cannot write the split of " + path);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Workload> PrepareWorkload(const WorkloadOptions& o) {
  std::error_code ec;
  fs::create_directories(o.work_dir, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create ", o.work_dir, ": ", ec.message()));
  Workload w;
  std::string trace = o.trace, token_map = o.token_map;
  if (trace.empty()) {
    RETURN_IF_ERROR(DefaultTrace(o, &trace, &token_map, &w.description));
  } else {
    w.description = "token trace " + trace;
  }
  ASSIGN_OR_RETURN(uint64_t trace_hash, HashFile(trace));
  uint64_t map_hash = 0;
  if (!token_map.empty()) {
    ASSIGN_OR_RETURN(uint64_t h, HashFile(token_map));
    map_hash = h;
  }
  const bool fp8 = o.encoding == RowEncoding::kFp8;
  const std::string encoding = fp8 ? "" : absl::StrCat("-", RowEncodingName(o.encoding));
  w.dir = absl::StrFormat("%s/%s%s-vocab%d-%08x", o.work_dir, o.preset, encoding,
                          o.engram_vocab_size, static_cast<uint32_t>(trace_hash ^ (map_hash * 31)));
  w.profile_trace = w.dir + "/profile.trace";
  w.workload_trace = w.dir + "/workload.trace";
  w.table_dir = w.dir + "/table";
  const std::string stamp = w.dir + "/stamp";
  // Paths as absolute ones: a relative --work-dir names the same files.
  auto absolute = [](const std::string& path) {
    std::error_code ignored;
    return path.empty() ? std::string("-")
                        : fs::absolute(path, ignored).lexically_normal().string();
  };
  const std::string want =
      absl::StrCat(o.preset, encoding, " vocab=", o.engram_vocab_size, " trace=", absolute(trace),
                   " token_map=", absolute(token_map), "\n");
  absl::StatusOr<std::string> have = ReadFileToString(stamp);
  if (have.ok() && *have == want) return w;

  // Build afresh: a directory without a matching stamp is half-built.
  RETURN_IF_ERROR(RemoveTree(w.dir));
  fs::create_directories(w.dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", w.dir, ": ", ec.message()));
  RETURN_IF_ERROR(SplitTrace(trace, w.profile_trace, w.workload_trace));
  Say(absl::StrCat("generating a ", o.preset, "-geometry table (engram_vocab_size ",
                   o.engram_vocab_size, ", ", RowEncodingName(o.encoding), " rows) in ",
                   w.table_dir));
  GenTableOptions g;
  g.out_dir = w.table_dir;
  g.preset = o.preset;
  g.engram_vocab_size = o.engram_vocab_size;
  g.token_map_file = token_map;
  g.encoding = o.encoding;
  if (absl::Status s = GenerateTable(g, {}); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("generating the table: ", s.message()));
  }
  RETURN_IF_ERROR(WriteFileAtomically(stamp, want));
  return w;
}

absl::StatusOr<std::vector<std::string>> PrepareShards(const Workload& w, int n_shards,
                                                       TailFormat tail_format) {
  std::vector<std::string> dirs;
  const std::string parent =
      absl::StrCat(w.dir, "/shards-", n_shards, "-", TailFormatName(tail_format));
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", parent, ": ", ec.message()));
  for (int i = 0; i < n_shards; ++i) {
    ImportOptions io;
    io.table_dir = w.table_dir;
    io.n_shards = static_cast<uint32_t>(n_shards);
    io.shard_index = static_cast<uint32_t>(i);
    io.out_dir = absl::StrCat(parent, "/shard-", i);
    io.profile_trace = w.profile_trace;
    io.tail_format = tail_format;
    absl::StatusOr<ImportResult> r = ImportShard(io, {});
    if (!r.ok()) {
      return absl::Status(r.status().code(), absl::StrCat("importing shard ", i, " of ", n_shards,
                                                          ": ", r.status().message()));
    }
    if (!r->already_imported) Say("imported " + io.out_dir);
    dirs.push_back(io.out_dir);
  }
  return dirs;
}

}  // namespace engram::bench
