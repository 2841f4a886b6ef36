// engramctl: the operator's tool for engram-store tables and deployments.
//
//   engramctl hash-check FILE.json...     replay hash golden files
//   engramctl dequant-check FILE.json...  replay GGUF row decoding goldens
//   engramctl gen-table --out DIR ...     write a synthetic table
//   engramctl import / manifest / layout  build shard data (tools/shard_commands.h)
//   engramctl footprint SHARD_DIR...      the RAM a shard needs (tools/shard_commands.h)
//   engramctl lookup ...                  check a deployment (tools/lookup_command.h)
//   engramctl shardmap ... / info ...     a deployment's addresses (tools/deploy_commands.h)
//   engramctl plan ...                    size the hot tier for a trace (tools/plan_command.h)
//
// Every subcommand exits 0 on success; on bad input it prints one line saying
// what is wrong and how to fix it, and exits non-zero.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/gen/hash_golden.h"
#include "common/gen/table_gen.h"
#include "common/util/flags.h"
#include "tools/deploy_commands.h"
#include "tools/dequant_check_command.h"
#include "tools/lookup_command.h"
#include "tools/plan_command.h"
#include "tools/progress.h"
#include "tools/shard_commands.h"
#include "tools/verify_command.h"

// gen-table defaults are GenTableOptions' (common/gen/table_gen.h).
static const engram::GenTableOptions kGenDefaults;

ABSL_FLAG(std::string, out, "", "output directory (gen-table, import)");
ABSL_FLAG(std::string, preset, kGenDefaults.preset, "gen-table: table geometry, small or v41");
ABSL_FLAG(int64_t, engram_vocab_size, kGenDefaults.engram_vocab_size,
          "gen-table: base size of the prime walk (released V4.1: 16000000)");
ABSL_FLAG(int32_t, head_dim, kGenDefaults.head_dim, "gen-table: values per row (0 = preset's)");
ABSL_FLAG(std::string, encoding, engram::RowEncodingName(kGenDefaults.encoding),
          "gen-table: row encoding, e4m3_e8m0 (the checkpoint's fp8) or a ggml or plain one "
          "(q8_0, q2_k..q6_k, mxfp4, bf16, f16, f32; head_dim a multiple of its block)");
ABSL_FLAG(uint64_t, seed, kGenDefaults.seed, "gen-table: seed of the synthetic rows and token map");
ABSL_FLAG(std::string, layout, kGenDefaults.layout_file,
          "gen-table: take the hash layout from this JSON file");
ABSL_FLAG(std::string, token_map, kGenDefaults.token_map_file,
          "gen-table: token map JSON (tools/make-token-map) instead of a random one");
ABSL_FLAG(std::string, table_name, kGenDefaults.table_name, "gen-table: table name");
ABSL_FLAG(uint64_t, table_version, kGenDefaults.version,
          "gen-table, import and manifest of a checkpoint or GGUF: table version");

namespace {

constexpr char kUsage[] =
    "engramctl <command> [flags]\n"
    "commands:\n"
    "  hash-check FILE.json...   replay Engram hash golden files\n"
    "  dequant-check FILE.json...\n"
    "                            replay GGUF row decoding golden files (gguf_dequant.json)\n"
    "  gen-table --out DIR [--preset small|v41] [--engram-vocab-size N]\n"
    "            [--head-dim D] [--encoding E] [--seed S] [--layout FILE] [--token-map FILE]\n"
    "                            write a deterministic synthetic table\n"
    "  import --table DIR | --checkpoint DIR | --gguf FILE --shards K --shard-index I\n"
    "         --out DIR [--profile-trace FILE] [--table-version N (checkpoint, GGUF)]\n"
    "         [--tail-format block|cuckoo]\n"
    "                            build shard I of K (RocksDB) from a table, an official\n"
    "                            safetensors checkpoint or a GGUF (any split)\n"
    "  manifest --checkpoint DIR | --gguf FILE --out TABLE_DIR [--table-version N]\n"
    "                            write the table directory workers read (no rows)\n"
    "  layout --from-gguf FILE [--out FILE]\n"
    "                            write the hash layout JSON a client needs\n"
    "  footprint SHARD_DIR...    the smallest engram-shard --ram-budget each accepts and\n"
    "                            the one that holds it whole\n"
    "  lookup --table DIR --shards host:port,... --tokens \"12 7 99 ...\" [--json]\n"
    "         [--rpc-deadline 30s]\n"
    "                            fetch a token string's rows from a deployment\n"
    "  shardmap --from-dns SERVICE --shards K --replicas R [--port 7070]\n"
    "                            print the shard-map string of a Helm deployment\n"
    "  info --shards host:port,... [--timeout 5s]\n"
    "                            print what each shard server serves (its Info)\n"
    "  activate --shards host:port,... --to-version N [--admin-token-file F]\n"
    "                            switch every replica to table version N, one at a time\n"
    "  verify --db SHARD_DIR [--table DIR]  check every row against shard.json (and the table)\n"
    "  plan --trace FILE --table DIR --shards K --disk-iops N [--profile-trace FILE]\n"
    "       [--batch B] [--budgets 1%,5%,64M] [--json] [--png FILE]\n"
    "                            predict hit ratio, disk load and exposed wait per RAM budget\n"
    "lookup, info and activate take --tls-ca CA [--tls-cert C --tls-key K]\n"
    "[--tls-server-name N] for shards serving TLS; lookup and info --auth-token-file F\n"
    "flags may be spelled with '-' or '_' (--shard-index = --shard_index)\n";

int Fail(const std::string& line) {
  std::fprintf(stderr, "engramctl: %s\n", line.c_str());
  return 2;
}

int HashCheck(const std::vector<std::string>& files) {
  if (files.empty()) {
    return Fail(
        "hash-check needs at least one golden file, e.g. "
        "engramctl hash-check tests/golden/*.json");
  }
  int64_t passed = 0, failed = 0;
  for (const std::string& f : files) {
    absl::StatusOr<engram::HashGoldenResult> r = engram::CheckHashGoldenFile(f);
    if (!r.ok()) {
      // A file that cannot be replayed counts as one failed call.
      ++failed;
      std::printf("FAIL %s: %s\n", f.c_str(), std::string(r.status().message()).c_str());
      continue;
    }
    if (r->not_hash_golden) {
      std::printf("skip %s: no \"layout\" and \"calls\", not a hash golden file\n", f.c_str());
      continue;
    }
    passed += r->calls_passed;
    failed += r->calls_failed;
    if (r->calls_failed == 0) {
      std::printf("ok   %s: %lld calls, %lld ids\n", f.c_str(),
                  static_cast<long long>(r->calls_passed), static_cast<long long>(r->ids_checked));
    } else {
      std::printf("FAIL %s: %lld of %lld calls differ; first: %s\n", f.c_str(),
                  static_cast<long long>(r->calls_failed),
                  static_cast<long long>(r->calls_failed + r->calls_passed),
                  r->first_mismatch.c_str());
    }
  }
  std::printf("%lld passed, %lld failed\n", static_cast<long long>(passed),
              static_cast<long long>(failed));
  return failed == 0 ? 0 : 1;
}

int GenTable(const std::vector<std::string>& args) {
  if (!args.empty()) return Fail("gen-table takes flags only, not '" + args[0] + "'");
  engram::GenTableOptions o;
  o.out_dir = absl::GetFlag(FLAGS_out);
  if (o.out_dir.empty()) return Fail("gen-table needs --out DIR (a new directory for the table)");
  o.preset = absl::GetFlag(FLAGS_preset);
  o.engram_vocab_size = absl::GetFlag(FLAGS_engram_vocab_size);
  o.head_dim = absl::GetFlag(FLAGS_head_dim);
  absl::StatusOr<engram::RowEncoding> encoding =
      engram::ParseRowEncoding(absl::GetFlag(FLAGS_encoding));
  if (!encoding.ok())
    return Fail(absl::StrCat("gen-table: --encoding: ", encoding.status().message()));
  o.encoding = *encoding;
  o.seed = absl::GetFlag(FLAGS_seed);
  o.layout_file = absl::GetFlag(FLAGS_layout);
  o.token_map_file = absl::GetFlag(FLAGS_token_map);
  o.table_name = absl::GetFlag(FLAGS_table_name);
  o.version = absl::GetFlag(FLAGS_table_version);
  engram::ProgressBar bar("gen-table");
  absl::Status s =
      engram::GenerateTable(o, [&bar](uint64_t done, uint64_t total) { bar.Update(done, total); });
  bar.Finish();
  if (!s.ok()) return Fail(absl::StrCat("gen-table: ", s.message()));
  std::printf("gen-table: wrote %s\n", o.out_dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> positional = engram::ParseFlags(argc, argv);
  if (positional.size() < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = positional[1];
  std::vector<std::string> args(positional.begin() + 2, positional.end());
  if (command == "hash-check") return HashCheck(args);
  if (command == "dequant-check") return engram::DequantCheckCommand(args);
  if (command == "gen-table") return GenTable(args);
  if (command == "import") return engram::ImportCommand(args);
  if (command == "manifest") return engram::ManifestCommand(args);
  if (command == "layout") return engram::LayoutCommand(args);
  if (command == "footprint") return engram::FootprintCommand(args);
  if (command == "lookup") return engram::LookupCommand(args);
  if (command == "shardmap") return engram::ShardMapCommand(args);
  if (command == "info") return engram::InfoCommand(args);
  if (command == "activate") return engram::ActivateCommand(args);
  if (command == "verify") return engram::VerifyCommand(args);
  if (command == "plan") return engram::PlanCommand(args);
  return Fail(absl::StrCat("unknown command '", command, "'; run engramctl --help for the list"));
}
