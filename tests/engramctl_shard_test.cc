// engramctl import / layout as an operator runs them: a real process, exit
// codes and output lines.
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/format/table.h"
#include "common/hash/layout.h"
#include "common/testing/test_files.h"
#include "common/util/file_util.h"
#include "gtest/gtest.h"
#include "shard/import/testing/gguf_writer.h"
#include "shard/row_store.h"

namespace engram {
namespace {

struct CliRun {
  int exit_code;
  std::string output;  // stdout and stderr
};

CliRun Engramctl(const std::string& args) {
  const std::string cmd = std::string(ENGRAM_BIN_DIR) + "/engramctl " + args + " 2>&1";
  CliRun r{-1, ""};
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class EngramctlShardTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(testing::MakeSmallTable(dir_.Sub("table")).ok()); }
  testing::TempDir dir_;
};

TEST_F(EngramctlShardTest, ImportTwiceThenRefuseAnotherShard) {
  const std::string base =
      "import --table " + dir_.Sub("table") + " --shards 2 --out " + dir_.Sub("s1");
  CliRun r = Engramctl(base + " --shard-index 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("import: wrote shard 1 of 2"), std::string::npos) << r.output;
  EXPECT_TRUE(RowStore::Open(dir_.Sub("s1"), {.reader_threads = 1}).ok());

  r = Engramctl(base + " --shard_index=1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("already imported"), std::string::npos) << r.output;

  r = Engramctl(base + " --shard-index 0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("pick another --out or delete it"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;

  // A cuckoo tail, said in the summary; the same --out with the other
  // format is refused.
  const std::string cuckoo =
      "import --table " + dir_.Sub("table") + " --shards 2 --shard-index 1 --out " + dir_.Sub("c1");
  r = Engramctl(cuckoo + " --tail-format cuckoo");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cuckoo tail"), std::string::npos) << r.output;
  EXPECT_TRUE(RowStore::Open(dir_.Sub("c1"), {.reader_threads = 1}).ok());
  r = Engramctl(cuckoo);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("tail format"), std::string::npos) << r.output;
}

TEST_F(EngramctlShardTest, BadImportFlagsAreOneLineErrors) {
  const std::vector<std::string> cases = {
      "import --shards 2 --shard-index 0 --out x",
      "import --table t --shards 2 --shard-index 2 --out x",
      "import --table t --gguf g --shards 2 --shard-index 0 --out x",
      "import --table " + dir_.Sub("nope") + " --shards 1 --shard-index 0 --out " + dir_.Sub("x"),
      "import --table " + dir_.Sub("table") + " --shards 1 --shard-index 0 --out " + dir_.Sub("x") +
          " --tail-format lsm",
      "layout",
      "layout --from-gguf " + dir_.Sub("nope.gguf")};
  for (const std::string& args : cases) {
    CliRun r = Engramctl(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_EQ(r.output.rfind("engramctl: ", 0), 0u) << args << ": " << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << args << ": " << r.output;
  }
}

TEST_F(EngramctlShardTest, LayoutFromGgufMatchesTheTable) {
  absl::StatusOr<TableManifest> m = TableManifest::Load(dir_.Sub("table"));
  ASSERT_TRUE(m.ok());
  const std::string gguf = dir_.Sub("model.gguf");
  ASSERT_TRUE(testing::EngramGguf(m->layout, 3).Write(gguf).ok());
  CliRun r = Engramctl("layout --from-gguf " + gguf);
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(0, 300);
  EXPECT_EQ(r.output, m->layout.ToJson() + "\n");

  r = Engramctl("layout --from-gguf " + gguf + " --out " + dir_.Sub("layout.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  absl::StatusOr<HashLayout> back = HashLayout::FromFile(dir_.Sub("layout.json"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), m->layout.ToJson());

  r = Engramctl("import --gguf " + gguf + " --shards 3 --shard-index 2 --table-version 7 --out " +
                dir_.Sub("g2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("of table test-engram v7"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace engram
