#include "service/testing/server_test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/metrics/scrape.h"
#include "common/table_gen.h"
#include "grpcpp/generic/generic_stub.h"
#include "shard/importer.h"

extern char** environ;

namespace engram::testing {

absl::StatusOr<SmallShardedTable> MakeSmallShardedTable(
    const std::string& table_dir, uint32_t n_shards,
    const std::function<std::string(uint32_t)>& shard_dir) {
  GenTableOptions gen;
  gen.out_dir = table_dir;
  gen.preset = "small";
  gen.engram_vocab_size = kSmallVocab;
  gen.table_name = kSmallTableName;
  gen.version = kSmallTableVersion;
  if (absl::Status s = GenerateTable(gen, nullptr); !s.ok()) return s;
  ShardMap map;
  for (uint32_t i = 0; i < n_shards; ++i) {
    ImportOptions import;
    import.table_dir = table_dir;
    import.n_shards = n_shards;
    import.shard_index = i;
    import.out_dir = shard_dir(i);
    absl::StatusOr<ImportResult> result = ImportShard(import, nullptr);
    if (!result.ok()) return result.status();
    map = result->map;
  }
  absl::StatusOr<std::unique_ptr<TableReader>> table = TableReader::Open(table_dir);
  if (!table.ok()) return table.status();
  return SmallShardedTable{std::move(map), *std::move(table)};
}

TempDir::TempDir(const std::string& prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(base != nullptr ? base : "/tmp", "/", prefix, ".XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) std::abort();
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::shared_ptr<grpc::Channel> LocalChannel(int port) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

grpc::Status RawUnaryCall(grpc::Channel& channel, const std::string& method,
                          const grpc::ByteBuffer& request,
                          grpc::ByteBuffer* response, absl::Duration timeout) {
  grpc::GenericStub stub(
      std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  absl::Notification done;
  grpc::Status result;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, response,
                 [&](grpc::Status status) {
                   result = std::move(status);
                   done.Notify();
                 });
  done.WaitForNotification();
  return result;
}

grpc::ByteBuffer ToByteBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string ToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  absl::StatusOr<metrics::HttpResponse> r = metrics::HttpGet(port, path);
  if (!r.ok()) return r.status();
  if (r->status != 200) {
    return absl::InternalError(r->headers.substr(0, r->headers.find("\r\n")));
  }
  return std::move(r->body);
}

std::optional<double> MetricValue(const std::string& page,
                                  const std::string& metric) {
  const std::string prefix = metric + " ";
  size_t pos = 0;
  while (pos < page.size()) {
    size_t end = page.find('\n', pos);
    if (end == std::string::npos) end = page.size();
    const std::string_view line(page.data() + pos, end - pos);
    if (line.substr(0, prefix.size()) == prefix) {
      double value;
      std::string text(line.substr(prefix.size()));
      if (absl::SimpleAtod(text, &value)) return value;
    }
    pos = end + 1;
  }
  return std::nullopt;
}

std::vector<uint64_t> RandomOwnedIds(const ShardMap& map, uint32_t layer,
                                     uint32_t shard, size_t n,
                                     std::mt19937_64& rng) {
  const uint64_t owned = map.RowsOnShard(layer, shard);
  std::vector<uint64_t> ids(n);
  for (uint64_t& id : ids) id = shard + (rng() % owned) * map.n_shards;
  return ids;
}

std::vector<uint64_t> AllOwnedIds(const ShardMap& map, uint32_t layer,
                                  uint32_t shard) {
  std::vector<uint64_t> ids;
  for (uint64_t id = shard; id < map.layer_rows[layer]; id += map.n_shards) {
    ids.push_back(id);
  }
  return ids;
}

std::string ExpectedRows(const TableReader& table, uint32_t layer,
                         const std::vector<uint64_t>& ids) {
  const size_t row_bytes = table.manifest().layers[layer].row_bytes;
  std::string out(ids.size() * row_bytes, '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    const absl::Status s =
        table.ReadRow(static_cast<int>(layer), ids[i],
                      reinterpret_cast<uint8_t*>(out.data()) + i * row_bytes);
    if (!s.ok()) std::abort();
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(
    const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  const int rc =
      ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return absl::InternalError(absl::StrCat("cannot start ", argv[0]));
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, fds[0]));
}

ChildProcess::~ChildProcess() {
  if (!reaped_) {
    ::kill(pid_, SIGKILL);
    Wait();
  }
  ::close(stdout_fd_);
}

absl::StatusOr<std::string> ChildProcess::ReadLine(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const size_t nl = buffered_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return absl::DeadlineExceededError("no line from the child");
    pollfd p{stdout_fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(ms)) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(stdout_fd_, buf, sizeof(buf));
    if (n <= 0) return absl::OutOfRangeError("child closed its stdout");
    buffered_.append(buf, n);
  }
}

void ChildProcess::Signal(int sig) { ::kill(pid_, sig); }

int ChildProcess::Wait() {
  if (!reaped_) {
    ::waitpid(pid_, &wait_status_, 0);
    reaped_ = true;
  }
  return wait_status_;
}

absl::StatusOr<int> RunCommand(const std::vector<std::string>& argv,
                               const std::string& stdin_path,
                               const std::string& stderr_path) {
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!stdin_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, stdin_path.c_str(),
                                     O_RDONLY, 0);
  }
  if (!stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO,
                                     stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  pid_t pid;
  // posix_spawnp: argv[0] may be a program on $PATH (promtool).
  const int rc =
      ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return absl::InternalError(absl::StrCat("cannot start ", argv[0]));
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) {
    return absl::InternalError(absl::StrCat(argv[0], " was killed"));
  }
  return WEXITSTATUS(status);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace engram::testing
