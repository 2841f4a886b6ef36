// engramctl: the operator's tool for engram-store tables and deployments.
//
//   engramctl hash-check FILE.json...     replay hash golden files
//   engramctl gen-table --out DIR ...     write a synthetic table
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
#include "client/hash_golden.h"

namespace {

constexpr char kUsage[] =
    "engramctl <command> [flags]\n"
    "commands:\n"
    "  hash-check FILE.json...   replay Engram hash golden files\n"
    "  gen-table --out DIR [--preset small|v41] [--engram-vocab-size N]\n"
    "            [--head-dim D] [--seed S] [--layout FILE] [--token-map FILE]\n"
    "                            write a deterministic synthetic table\n";

int Fail(const std::string& line) {
  std::fprintf(stderr, "engramctl: %s\n", line.c_str());
  return 2;
}

int HashCheck(const std::vector<std::string>& files) {
  if (files.empty()) {
    return Fail("hash-check needs at least one golden file, e.g. "
                "engramctl hash-check ../shared/golden/*.json");
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
      std::printf("skip %s: no \"layout\" and \"calls\", not a hash golden file\n",
                  f.c_str());
      continue;
    }
    passed += r->calls_passed;
    failed += r->calls_failed;
    if (r->calls_failed == 0) {
      std::printf("ok   %s: %lld calls, %lld ids\n", f.c_str(),
                  static_cast<long long>(r->calls_passed),
                  static_cast<long long>(r->ids_checked));
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

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = positional[1];
  std::vector<std::string> args(positional.begin() + 2, positional.end());
  if (command == "hash-check") return HashCheck(args);
  return Fail(absl::StrCat("unknown command '", command,
                           "'; run engramctl --help for the list"));
}
