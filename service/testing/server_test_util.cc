#include "service/testing/server_test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/gen/table_gen.h"
#include "common/net/prometheus_scrape.h"
#include "common/util/status_macros.h"
#include "grpcpp/generic/generic_stub.h"
#include "shard/import/importer.h"

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
  RETURN_IF_ERROR(GenerateTable(gen, nullptr));
  ShardMap map;
  for (uint32_t i = 0; i < n_shards; ++i) {
    ImportOptions import;
    import.table_dir = table_dir;
    import.n_shards = n_shards;
    import.shard_index = i;
    import.out_dir = shard_dir(i);
    ASSIGN_OR_RETURN(ImportResult result, ImportShard(import, nullptr));
    map = result.map;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TableReader> table, TableReader::Open(table_dir));
  return SmallShardedTable{std::move(map), std::move(table)};
}

std::shared_ptr<grpc::Channel> LocalChannel(int port) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

grpc::Status RawUnaryCall(grpc::Channel& channel, const std::string& method,
                          const grpc::ByteBuffer& request, grpc::ByteBuffer* response,
                          absl::Duration timeout) {
  grpc::GenericStub stub(std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
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
  absl::StatusOr<scrape::HttpResponse> r = scrape::HttpGet(port, path);
  if (!r.ok()) return r.status();
  if (r->status != 200) {
    return absl::InternalError(r->headers.substr(0, r->headers.find("\r\n")));
  }
  return std::move(r->body);
}

std::optional<std::string> PromtoolCheckMetrics(const std::string& page) {
  constexpr char kPromtool[] = "/usr/bin/promtool";
  if (::access(kPromtool, X_OK) != 0) return std::nullopt;
  std::string file = "/tmp/engram_promtool_XXXXXX";
  const int fd = ::mkstemp(file.data());
  if (fd < 0) return "mkstemp failed";
  ::close(fd);
  std::ofstream(file) << page;
  const std::string command = absl::StrCat(kPromtool, " check metrics < ", file, " 2>&1");
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  std::string output;
  char buf[512];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) output.append(buf, n);
  const int status = ::pclose(pipe);
  ::unlink(file.c_str());
  if (status == 0) return std::string();
  return output.empty() ? std::string("promtool failed") : output;
}

std::optional<double> MetricValue(const std::string& page, const std::string& metric) {
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

std::vector<uint64_t> RandomOwnedIds(const ShardMap& map, uint32_t layer, uint32_t shard, size_t n,
                                     std::mt19937_64& rng) {
  const uint64_t owned = map.RowsOnShard(layer, shard);
  std::vector<uint64_t> ids(n);
  for (uint64_t& id : ids) id = shard + (rng() % owned) * map.n_shards;
  return ids;
}

std::vector<uint64_t> AllOwnedIds(const ShardMap& map, uint32_t layer, uint32_t shard) {
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
    const absl::Status s = table.ReadRow(static_cast<int>(layer), ids[i],
                                         reinterpret_cast<uint8_t*>(out.data()) + i * row_bytes);
    if (!s.ok()) std::abort();
  }
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace engram::testing
