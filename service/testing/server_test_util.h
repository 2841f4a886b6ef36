// Helpers for tests that drive real shard servers: temporary directories,
// the small synthetic table, raw gRPC calls, HTTP scrapes and child
// processes (common/testing/child_process.h). Test-only (library engram_server_testing).
#ifndef ENGRAM_SERVICE_TESTING_SERVER_TEST_UTIL_H_
#define ENGRAM_SERVICE_TESTING_SERVER_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/format/shard_map.h"
#include "common/format/table.h"
#include "common/testing/child_process.h"
#include "common/testing/test_files.h"
#include "grpcpp/grpcpp.h"

namespace engram::testing {

// The small table the server tests use: preset "small" (two Engram layers,
// 66-byte rows) with engram_vocab_size 300, a few thousand rows per layer.
inline constexpr int64_t kSmallVocab = 300;
inline constexpr char kSmallTableName[] = "engram-test";
inline constexpr uint64_t kSmallTableVersion = 3;

// The small table, imported: the shard map the import wrote and a reader
// of the table file (to check served rows against).
struct SmallShardedTable {
  ShardMap map;
  std::unique_ptr<TableReader> table;
};
// Generates the small table into `table_dir` and imports it into
// `n_shards` shard directories, shard i into shard_dir(i).
absl::StatusOr<SmallShardedTable> MakeSmallShardedTable(
    const std::string& table_dir, uint32_t n_shards,
    const std::function<std::string(uint32_t)>& shard_dir);

// A channel to 127.0.0.1:port that accepts responses of any size.
std::shared_ptr<grpc::Channel> LocalChannel(int port);

// A blocking unary call with raw request and response bytes.
grpc::Status RawUnaryCall(grpc::Channel& channel, const std::string& method,
                          const grpc::ByteBuffer& request, grpc::ByteBuffer* response,
                          absl::Duration timeout = absl::Seconds(60));
grpc::ByteBuffer ToByteBuffer(const std::string& bytes);
std::string ToString(const grpc::ByteBuffer& buffer);

// GET http://127.0.0.1:<port><path>; the body of a 200 response.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);
// The value of the first sample line of `metric` (name plus labels exactly
// as written, e.g. `engram_shard_rows_total{layer="0",tier="disk"}`) in a
// Prometheus text page, or nullopt.
std::optional<double> MetricValue(const std::string& page, const std::string& metric);
// Runs `promtool check metrics` on `page`: "" when it passes, promtool's
// output when it does not, nullopt when promtool is not installed.
std::optional<std::string> PromtoolCheckMetrics(const std::string& page);

// `n` ids of `layer` owned by `shard`, uniform with repeats.
std::vector<uint64_t> RandomOwnedIds(const ShardMap& map, uint32_t layer, uint32_t shard, size_t n,
                                     std::mt19937_64& rng);
// Every id of `layer` owned by `shard`, ascending.
std::vector<uint64_t> AllOwnedIds(const ShardMap& map, uint32_t layer, uint32_t shard);
// The stored bytes of `ids` of `layer`, concatenated, read from the table.
std::string ExpectedRows(const TableReader& table, uint32_t layer,
                         const std::vector<uint64_t>& ids);

// The contents of a file ("" if it cannot be read).
std::string ReadFile(const std::string& path);

}  // namespace engram::testing

#endif  // ENGRAM_SERVICE_TESTING_SERVER_TEST_UTIL_H_
