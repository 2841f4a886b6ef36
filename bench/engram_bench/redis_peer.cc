#include "bench/engram_bench/redis_peer.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/engram_bench/engram_bench_proc.h"
#include "common/format/shard_map.h"
#include "common/util/status_macros.h"

namespace engram::bench {
namespace {

constexpr int kStartAttempts = 3;  // a free port may be taken meanwhile

// The shards' own key bytes (common/format/shard_map.h).
void EncodeKey(uint32_t layer, uint64_t row, uint8_t* out) {
  EncodeShardKey(ShardKey(layer, row), reinterpret_cast<char*>(out));
}

// Connects to 127.0.0.1:port; nullptr (and the reason) when that fails.
redisContext* ConnectContext(int port, absl::Duration timeout, std::string* error) {
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, absl::ToTimeval(timeout));
  if (c == nullptr) {
    *error = "out of memory";
    return nullptr;
  }
  if (c->err != 0) {
    *error = c->errstr;
    redisFree(c);
    return nullptr;
  }
  return c;
}

bool AnswersPing(int port) {
  std::string error;
  redisContext* c = ConnectContext(port, absl::Milliseconds(200), &error);
  if (c == nullptr) return false;
  auto* reply = static_cast<redisReply*>(redisCommand(c, "PING"));
  const bool ok =
      reply != nullptr && reply->type == REDIS_REPLY_STATUS && std::strcmp(reply->str, "PONG") == 0;
  if (reply != nullptr) freeReplyObject(reply);
  redisFree(c);
  return ok;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start(const RedisServerOptions& o) {
  if (o.work_dir.empty()) return absl::InvalidArgumentError("RedisServer: no work_dir");
  const std::string log = o.work_dir + "/redis.log";
  std::string last_error = "not started";
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    absl::StatusOr<int> port = FreeLoopbackPort();
    if (!port.ok()) return port.status();
    testing::ChildOptions child_options;
    child_options.pipe_stdout = false;
    child_options.stdout_path = log;
    child_options.stderr_path = log;
    child_options.die_with_parent = true;
    absl::StatusOr<std::unique_ptr<testing::ChildProcess>> child = testing::ChildProcess::Spawn(
        {o.binary, "--bind", "127.0.0.1", "--port", absl::StrCat(*port), "--save", "",
         "--appendonly", "no", "--dir", o.work_dir, "--daemonize", "no", "--logfile", "",
         "--databases", "1"},
        child_options);
    if (!child.ok()) {
      return absl::Status(child.status().code(),
                          absl::StrCat(child.status().message(),
                                       " (install redis-server or pass --redis-server PATH)"));
    }
    const absl::Time deadline = absl::Now() + o.start_timeout;
    while ((*child)->Running() && absl::Now() < deadline) {
      if (AnswersPing(*port)) {
        return std::unique_ptr<RedisServer>(new RedisServer(*std::move(child), *port));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    (*child)->Stop(absl::Seconds(2));
    last_error = testing::LastLineOf(log);
  }
  return absl::UnavailableError(
      absl::StrCat(o.binary, " did not answer PING on 127.0.0.1: ", last_error));
}

RedisServer::~RedisServer() { child_->Stop(absl::Seconds(10)); }

absl::StatusOr<std::unique_ptr<RedisRowClient>> RedisRowClient::Connect(int port) {
  std::string error;
  redisContext* c = ConnectContext(port, absl::Seconds(5), &error);
  if (c == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to redis on 127.0.0.1:", port, ": ", error));
  }
  redisSetTimeout(c, absl::ToTimeval(absl::Seconds(60)));
  return std::unique_ptr<RedisRowClient>(new RedisRowClient(c));
}

RedisRowClient::~RedisRowClient() { redisFree(context_); }

absl::Status RedisRowClient::LoadLayer(uint32_t layer, const uint8_t* rows, uint64_t n,
                                       uint32_t row_bytes, int pipeline) {
  uint8_t key[8];
  const char* argv[3] = {"SET", reinterpret_cast<const char*>(key), nullptr};
  size_t argv_len[3] = {3, sizeof(key), row_bytes};
  uint64_t queued = 0;
  auto drain = [&]() -> absl::Status {
    for (; queued > 0; --queued) {
      void* raw = nullptr;
      if (redisGetReply(context_, &raw) != REDIS_OK) {
        return absl::UnavailableError(absl::StrCat("redis SET: ", context_->errstr));
      }
      auto* reply = static_cast<redisReply*>(raw);
      const bool ok = reply->type == REDIS_REPLY_STATUS;
      const std::string what = ok ? "" : std::string(reply->str != nullptr ? reply->str : "?");
      freeReplyObject(reply);
      if (!ok) return absl::InternalError(absl::StrCat("redis SET failed: ", what));
    }
    return absl::OkStatus();
  };
  for (uint64_t r = 0; r < n; ++r) {
    EncodeKey(layer, r, key);
    argv[2] = reinterpret_cast<const char*>(rows + r * row_bytes);
    redisAppendCommandArgv(context_, 3, argv, argv_len);
    if (++queued == static_cast<uint64_t>(pipeline)) {
      RETURN_IF_ERROR(drain());
    }
  }
  return drain();
}

absl::Status RedisRowClient::Mget(std::span<const MgetBatch> batches, uint32_t row_bytes) {
  for (const MgetBatch& b : batches) {
    const size_t n = b.ids.size();
    keys_.resize(8 * n);
    argv_.resize(n + 1);
    argv_len_.resize(n + 1);
    argv_[0] = "MGET";
    argv_len_[0] = 4;
    for (size_t i = 0; i < n; ++i) {
      EncodeKey(b.layer, b.ids[i], &keys_[8 * i]);
      argv_[i + 1] = reinterpret_cast<const char*>(&keys_[8 * i]);
      argv_len_[i + 1] = 8;
    }
    // Formats the command into the output buffer (a copy of the keys).
    redisAppendCommandArgv(context_, static_cast<int>(n + 1), argv_.data(), argv_len_.data());
  }
  absl::Status status = absl::OkStatus();
  for (const MgetBatch& b : batches) {  // every reply is read, even after an error
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK) {
      return absl::UnavailableError(absl::StrCat("redis MGET: ", context_->errstr));
    }
    auto* reply = static_cast<redisReply*>(raw);
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != b.ids.size()) {
      status.Update(absl::InternalError(absl::StrCat(
          "redis MGET of ", b.ids.size(), " keys: unexpected reply type ", reply->type)));
    } else {
      for (size_t i = 0; i < reply->elements && status.ok(); ++i) {
        const redisReply* e = reply->element[i];
        if (e->type != REDIS_REPLY_STRING || e->len != static_cast<size_t>(row_bytes)) {
          status = absl::DataLossError(absl::StrCat(
              "redis has no ", row_bytes, "-byte value for layer ", b.layer, " row ", b.ids[i]));
          break;
        }
        std::memcpy(b.dst + i * row_bytes, e->str, row_bytes);
      }
    }
    freeReplyObject(reply);
  }
  return status;
}

}  // namespace engram::bench
