#include "tools/verify_command.h"

#include <cstdio>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "shard/verify.h"
#include "tools/progress.h"

ABSL_DECLARE_FLAG(std::string, table);
ABSL_FLAG(std::string, db, "", "verify: the shard directory to check (written by import)");

namespace engram {

int VerifyCommand(const std::vector<std::string>& args) {
  if (!args.empty()) {
    std::fprintf(stderr, "engramctl: verify takes flags only, not '%s'\n", args[0].c_str());
    return 2;
  }
  VerifyOptions o;
  o.shard_dir = absl::GetFlag(FLAGS_db);
  o.table_dir = absl::GetFlag(FLAGS_table);
  if (o.shard_dir.empty()) {
    std::fprintf(stderr, "engramctl: verify needs --db SHARD_DIR (a directory import wrote)\n");
    return 2;
  }
  ProgressBar bar("verify");
  absl::StatusOr<VerifyReport> report =
      VerifyShard(o, [&bar](uint64_t done, uint64_t total) { bar.Update(done, total); });
  bar.Finish();
  if (!report.ok()) {
    std::fprintf(stderr, "engramctl: verify: %s\n",
                 absl::StrCat(absl::StatusCodeToString(report.status().code()), ": ",
                              report.status().message())
                     .c_str());
    return 1;
  }
  for (const std::string& line : report->Lines()) std::printf("%s\n", line.c_str());
  return report->ok() ? 0 : 1;
}

}  // namespace engram
