// engram-fault-driver: the client side of the multi-host fault test
// (tests/fault/fault_test.py).
//
// Drives decode steps through EngramClient at a bounded rate for a bounded
// time: --batch sequences, one token each per step, every sequence
// advancing and starting a new generation after about --reset-after tokens
// (staggered, so a step mixes new and old sequences). Steps run one at a
// time; the next starts one period after the previous one started, or at
// once when that is past (a slow step delays the next, it never causes a
// burst).
//
// Every step writes one JSON line to --out:
//   {"step":N,"t":UNIX_SECONDS,"latency_ms":X,"status":"OK"|CODE,
//    "layers_ok":A,"layers_failed":B,"partial":bool,"rows_checked":R,
//    "wrong_rows":W,"retries":.,"hedges":.,"failed_rpcs":.,"error":"..."}
// `t` is the step's start on CLOCK_REALTIME (the fault script records its
// faults on the same clock); `latency_ms` runs from Prefetch to the last
// layer's Wait returning. A step is OK only if every layer's Wait was OK;
// a step with some layers OK and some failed is "partial" and counts as
// failed, with the first failed layer's status. Every row of every layer
// whose Wait returned OK is compared, byte for byte, with the table file
// (common/format/table.h): a row that differs is a wrong row, whatever the step's
// status. The output buffers are filled with a pattern before each Wait,
// so a row Wait did not write is caught too.
//
// The first line of --out is {"meta":...}: the options the step latencies
// are bounded by. The run ends after --seconds, or after the step in
// progress when SIGTERM or SIGINT comes. A watchdog ends the process (exit
// 3, after writing a {"hung":...} line) when one step has not finished
// after --hang-limit, which no deadline allows. Exit 0 when the run ended
// with no wrong row (failed steps are expected under faults), 2 with a
// wrong row, 1 when it could not run.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/engram_client.h"
#include "common/format/table.h"
#include "common/net/shard_addresses.h"
#include "common/util/flags.h"

ABSL_FLAG(std::string, table, "", "table directory (manifest.json, rows.safetensors)");
ABSL_FLAG(std::string, shard_map, "", "shard_map.json of the deployment");
ABSL_FLAG(std::string, shards, "", "replica addresses, shard 0 first: a|b,c|d,...");
ABSL_FLAG(double, steps_per_second, 50, "upper bound on the step rate");
ABSL_FLAG(double, seconds, 40, "how long to run");
ABSL_FLAG(int32_t, batch, 8, "sequences per step (one token each)");
ABSL_FLAG(int32_t, reset_after, 100, "tokens before a sequence starts a new generation (about)");
ABSL_FLAG(std::string, out, "", "file for one JSON line per step");
ABSL_FLAG(absl::Duration, rpc_deadline, absl::Milliseconds(300), "ClientOptions::rpc_deadline");
ABSL_FLAG(absl::Duration, step_deadline, absl::Seconds(5),
          "ClientOptions::step_deadline (the library's default)");
ABSL_FLAG(bool, hedge, true, "ClientOptions::hedge");
ABSL_FLAG(absl::Duration, hedge_delay, absl::ZeroDuration(),
          "ClientOptions::hedge_delay (0 = recent p95)");
ABSL_FLAG(absl::Duration, max_reconnect_backoff, absl::Seconds(2),
          "ClientOptions::max_reconnect_backoff (the library's default)");
ABSL_FLAG(std::string, transport, "stream", "stream (row stream where offered) or grpc");
ABSL_FLAG(absl::Duration, hang_limit, absl::Seconds(10),
          "a step still running after this is a hang: write it down and exit 3");
ABSL_FLAG(uint64_t, seed, 1, "seed of the token stream");

namespace engram {
namespace {

// Set by SIGTERM / SIGINT: stop after the step in progress.
std::atomic<bool> stop_requested{false};
extern "C" void RequestStop(int) { stop_requested.store(true); }

int Fail(const std::string& line) {
  std::fprintf(stderr, "engram-fault-driver: %s\n", line.c_str());
  return 1;
}

// `s` as a JSON string literal.
std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

double UnixSeconds(absl::Time t) { return absl::ToUnixMicros(t) / 1e6; }

// The step in progress, for the watchdog.
struct Progress {
  absl::Mutex mu;
  int64_t step ABSL_GUARDED_BY(mu) = -1;  // -1: between steps
  absl::Time start ABSL_GUARDED_BY(mu);
  std::string phase ABSL_GUARDED_BY(mu);
  bool done ABSL_GUARDED_BY(mu) = false;
};

// Writes one {"hung":...} line and ends the process when a step runs past
// `limit`; returns when progress.done is set.
void Watchdog(Progress& progress, absl::Duration limit, std::FILE* out) {
  absl::MutexLock l(&progress.mu);
  while (!progress.done) {
    progress.mu.AwaitWithTimeout(absl::Condition(&progress.done), absl::Milliseconds(100));
    if (progress.done || progress.step < 0) continue;
    const absl::Duration running = absl::Now() - progress.start;
    if (running < limit) continue;
    const std::string line =
        absl::StrCat("{\"hung\":{\"step\":", progress.step,
                     ",\"t\":", absl::StrFormat("%.6f", UnixSeconds(progress.start)),
                     ",\"running_ms\":", absl::ToDoubleMilliseconds(running),
                     ",\"phase\":", JsonString(progress.phase), "}}\n");
    std::fputs(line.c_str(), out);
    std::fflush(out);
    std::fprintf(stderr, "engram-fault-driver: step %lld hung in %s for %s\n",
                 static_cast<long long>(progress.step), progress.phase.c_str(),
                 absl::FormatDuration(running).c_str());
    _exit(3);
  }
}

struct StepResult {
  absl::Status status;  // OK, or the first failed layer's
  int layers_ok = 0;
  int layers_failed = 0;
  uint64_t rows_checked = 0;
  uint64_t wrong_rows = 0;
};

// Waits for every layer of `step` and compares the rows of each layer that
// arrived with `table`.
StepResult WaitAndCheck(EngramClient& client, Step& step, const TableReader& table,
                        Progress& progress, absl::Time* finished) {
  StepResult r;
  const int L = client.n_layers(), C = client.n_cols();
  const size_t positions = static_cast<size_t>(step.batch() * step.tokens_per_sequence());
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(L));
  std::vector<absl::Status> status(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    {
      absl::MutexLock lock(&progress.mu);
      progress.phase = absl::StrCat("Wait(layer ", l, ")");
    }
    out[l].assign(positions * C * client.OutputRowBytes(l, RowFormat::kRaw), 0xA5);
    status[l] = step.Wait(l, RowFormat::kRaw, out[l]);
    if (status[l].ok()) {
      ++r.layers_ok;
    } else {
      ++r.layers_failed;
      if (r.status.ok()) r.status = status[l];
    }
  }
  *finished = absl::Now();
  {
    absl::MutexLock lock(&progress.mu);
    progress.phase = "checking rows";
  }
  std::span<const RowId> ids = step.row_ids();
  for (int l = 0; l < L; ++l) {
    if (!status[l].ok()) continue;
    const size_t rb = static_cast<size_t>(client.row_bytes(l));
    std::vector<uint8_t> want(rb);
    for (size_t p = 0; p < positions; ++p) {
      for (int c = 0; c < C; ++c) {
        const RowId row = ids[(p * L + l) * C + c];
        ++r.rows_checked;
        const uint8_t* got = out[l].data() + (p * C + c) * rb;
        if (!table.ReadRow(l, row, want.data()).ok() || std::memcmp(got, want.data(), rb) != 0) {
          ++r.wrong_rows;
        }
      }
    }
  }
  return r;
}

int Run() {
  const std::string out_path = absl::GetFlag(FLAGS_out);
  if (out_path.empty()) return Fail("--out FILE is required");
  const double rate = absl::GetFlag(FLAGS_steps_per_second);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int batch = absl::GetFlag(FLAGS_batch);
  const int reset_after = absl::GetFlag(FLAGS_reset_after);
  if (!(rate > 0) || !(seconds > 0) || batch < 1 || reset_after < 1) {
    return Fail("--steps-per-second, --seconds, --batch and --reset-after must be positive");
  }

  ClientOptions o;
  o.table_dir = absl::GetFlag(FLAGS_table);
  o.shard_map_path = absl::GetFlag(FLAGS_shard_map);
  o.rpc_deadline = absl::GetFlag(FLAGS_rpc_deadline);
  o.step_deadline = absl::GetFlag(FLAGS_step_deadline);
  o.hedge = absl::GetFlag(FLAGS_hedge);
  o.hedge_delay = absl::GetFlag(FLAGS_hedge_delay);
  o.max_reconnect_backoff = absl::GetFlag(FLAGS_max_reconnect_backoff);
  const std::string transport = absl::GetFlag(FLAGS_transport);
  if (transport == "grpc") {
    o.transport = Transport::kGrpc;
  } else if (transport != "stream") {
    return Fail(absl::StrCat("--transport ", transport, ": want stream or grpc"));
  }
  if (const std::string shards = absl::GetFlag(FLAGS_shards); !shards.empty()) {
    absl::StatusOr<std::vector<std::vector<std::string>>> a = ParseShardAddresses(shards);
    if (!a.ok()) return Fail(absl::StrCat("--shards: ", a.status().message()));
    o.shard_addresses = *std::move(a);
  }
  const std::vector<std::vector<std::string>> addresses = o.shard_addresses;
  absl::StatusOr<std::unique_ptr<TableReader>> table = TableReader::Open(o.table_dir);
  if (!table.ok()) return Fail(std::string(table.status().message()));
  absl::StatusOr<std::unique_ptr<EngramClient>> created = EngramClient::Create(o);
  if (!created.ok()) return Fail(std::string(created.status().message()));
  EngramClient& client = **created;

  std::FILE* out = std::fopen(out_path.c_str(), "w");
  if (out == nullptr) return Fail(absl::StrCat(out_path, ": ", std::strerror(errno)));
  int max_replicas = 0;
  for (const auto& r : addresses) max_replicas = std::max<int>(max_replicas, r.size());
  std::fprintf(out,
               "{\"meta\":{\"layers\":%d,\"cols\":%d,\"shards\":%d,\"max_replicas\":%d,"
               "\"rpc_deadline_ms\":%g,\"hedge\":%s,\"batch\":%d,\"steps_per_second\":%g,"
               "\"shard_addresses\":%s}}\n",
               client.n_layers(), client.n_cols(), client.n_shards(), max_replicas,
               absl::ToDoubleMilliseconds(o.rpc_deadline), o.hedge ? "true" : "false", batch, rate,
               JsonString(FormatShardAddresses(addresses)).c_str());
  std::fflush(out);

  struct sigaction stop = {};
  stop.sa_handler = RequestStop;
  ::sigaction(SIGTERM, &stop, nullptr);
  ::sigaction(SIGINT, &stop, nullptr);
  Progress progress;
  std::thread watchdog([&] { Watchdog(progress, absl::GetFlag(FLAGS_hang_limit), out); });

  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  const int64_t vocab = client.layout().vocab_size;
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<Sequence*> ptrs;
  std::vector<int64_t> limit(static_cast<size_t>(batch));  // tokens before its reset
  for (int b = 0; b < batch; ++b) {
    seqs.push_back(client.NewSequence());
    ptrs.push_back(seqs.back().get());
    // Staggered: the first generation of sequence b is shorter.
    limit[b] = 1 + (static_cast<int64_t>(b) * reset_after) / batch;
  }
  std::vector<int64_t> starts(static_cast<size_t>(batch));
  std::vector<int64_t> tokens(static_cast<size_t>(batch));

  const absl::Duration period = absl::Seconds(1.0 / rate);
  const absl::Time begin = absl::Now();
  const absl::Time end = begin + absl::Seconds(seconds);
  absl::Time next = begin;
  uint64_t steps = 0, failed = 0, partial = 0, wrong = 0;
  ClientStats before = client.stats();
  for (int64_t n = 0;; ++n) {
    absl::Time now = absl::Now();
    if (now >= end || stop_requested.load()) break;
    if (next > now) absl::SleepFor(next - now);
    const absl::Time start = absl::Now();
    next = std::max(next + period, start);
    for (int b = 0; b < batch; ++b) {
      if (seqs[b]->length() >= limit[b]) {
        seqs[b]->Reset();
        limit[b] = reset_after - 10 + static_cast<int64_t>(rng() % 21);  // about reset_after
      }
      starts[b] = seqs[b]->length();
      // Zipf-like: repeats across sequences, so rows are de-duplicated.
      const double u = std::uniform_real_distribution<double>(0, 1)(rng);
      tokens[b] = static_cast<int64_t>(std::pow(static_cast<double>(vocab), u)) - 1;
      tokens[b] = std::clamp<int64_t>(tokens[b], 0, vocab - 1);
    }
    {
      absl::MutexLock l(&progress.mu);
      progress.step = n;
      progress.start = start;
      progress.phase = "Prefetch";
    }
    StepResult r;
    absl::Time finished = start;
    {
      absl::StatusOr<Step> step = client.Prefetch({ptrs, starts, 1, tokens, {}});
      if (!step.ok()) {
        // Prefetch validates only the input, which is always valid here.
        r.status = step.status();
        r.layers_failed = client.n_layers();
        finished = absl::Now();
      } else {
        r = WaitAndCheck(client, *step, **table, progress, &finished);
        absl::MutexLock l(&progress.mu);
        progress.phase = "releasing the step";
      }
    }  // the step is released here, inside the watchdog's view
    {
      absl::MutexLock l(&progress.mu);
      progress.step = -1;
    }
    const ClientStats after = client.stats();
    const bool is_partial = r.layers_ok > 0 && r.layers_failed > 0;
    ++steps;
    if (!r.status.ok()) ++failed;
    if (is_partial) ++partial;
    wrong += r.wrong_rows;
    std::fprintf(
        out,
        "{\"step\":%lld,\"t\":%.6f,\"latency_ms\":%.3f,\"status\":%s,\"layers_ok\":%d,"
        "\"layers_failed\":%d,\"partial\":%s,\"rows_checked\":%llu,\"wrong_rows\":%llu,"
        "\"retries\":%llu,\"hedges\":%llu,\"failed_rpcs\":%llu,\"error\":%s}\n",
        static_cast<long long>(n), UnixSeconds(start), absl::ToDoubleMilliseconds(finished - start),
        JsonString(r.status.ok() ? "OK" : absl::StatusCodeToString(r.status.code())).c_str(),
        r.layers_ok, r.layers_failed, is_partial ? "true" : "false",
        static_cast<unsigned long long>(r.rows_checked),
        static_cast<unsigned long long>(r.wrong_rows),
        static_cast<unsigned long long>(after.retries - before.retries),
        static_cast<unsigned long long>(after.hedges - before.hedges),
        static_cast<unsigned long long>(after.failed_rpcs - before.failed_rpcs),
        JsonString(r.status.message()).c_str());
    before = after;
  }
  std::fflush(out);
  {
    absl::MutexLock l(&progress.mu);
    progress.done = true;
  }
  watchdog.join();
  std::fclose(out);
  std::printf("engram-fault-driver: %llu steps, %llu failed (%llu partial), %llu wrong rows\n",
              static_cast<unsigned long long>(steps), static_cast<unsigned long long>(failed),
              static_cast<unsigned long long>(partial), static_cast<unsigned long long>(wrong));
  return wrong == 0 ? 0 : 2;
}

}  // namespace
}  // namespace engram

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "engram-fault-driver --table DIR --shard-map FILE --shards a|b,c|d --out FILE "
      "[--flag=value ...]\n"
      "Decode steps at a bounded rate for a bounded time, one JSON line per step, every\n"
      "row checked against the table file (tests/fault/fault_test.py runs it).\n"
      "Flags may be spelled with dashes or underscores.");
  const std::vector<char*> positional = engram::ParseFlags(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "engram-fault-driver: unexpected argument '%s'\n", positional[1]);
    return 1;
  }
  return engram::Run();
}
