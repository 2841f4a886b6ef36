// engram-demo: a simulated inference loop against a running deployment.
//
// Batch B sequences read a token trace (prefill, then decode steps). At
// token time each step is prefetched through the client library; then
// `--blocks` transformer blocks of `--block-us` simulated compute run, and
// at each Engram layer's block the loop waits for that layer's rows (the
// loop itself is inference/inference_loop.h). It verifies a sample of the
// returned rows against the table file and prints a summary whose last line
// is exactly
//   demo: N rows verified, W wrong, exposed wait X.X% of step time
// Exit 0 only when W == 0 and nothing failed.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/engram_client.h"
#include "common/format/table.h"
#include "common/net/prometheus_exposer.h"
#include "common/net/prometheus_scrape.h"
#include "common/net/shard_addresses.h"
#include "common/util/flags.h"
#include "inference/inference_loop.h"
#include "prometheus/registry.h"
#include "tools/progress.h"

ABSL_FLAG(std::string, table, "", "table directory (manifest.json, rows.safetensors)");
ABSL_FLAG(std::string, shard_map, "", "shard_map.json of the deployment");
ABSL_FLAG(std::string, shards, "",
          "shard addresses, shard 0 first: host:port,... (a|b for replicas); default: the "
          "shard map's replicas");
ABSL_FLAG(std::string, metrics_ports, "", "the shards' /metrics ports, same order");
ABSL_FLAG(std::string, trace, "", "token trace: one sequence per line");
ABSL_FLAG(int32_t, metrics_port, -1,
          "serve the client's Prometheus /metrics on 127.0.0.1:PORT while the loop runs "
          "(-1 = off, 0 = any free port; the chosen one is printed)");
// Loop defaults are InferenceLoopOptions' (inference/inference_loop.h).
static const engram::InferenceLoopOptions kLoopDefaults;

ABSL_FLAG(int32_t, batch, kLoopDefaults.batch, "sequences per step");
ABSL_FLAG(int32_t, prefill, kLoopDefaults.prefill, "prefill tokens per sequence");
ABSL_FLAG(int32_t, prefill_chunk, 32,
          "prefill tokens per sequence in one chunk (0 = the whole prefill); chunk k + 1 is "
          "prefetched while chunk k computes");
ABSL_FLAG(int32_t, decode_steps, kLoopDefaults.decode_steps, "decode steps after the prefill");
ABSL_FLAG(int32_t, blocks, kLoopDefaults.blocks, "simulated transformer blocks per step");
ABSL_FLAG(int32_t, block_us,
          static_cast<int32_t>(absl::ToInt64Microseconds(kLoopDefaults.block_time)),
          "simulated compute per block, microseconds");
ABSL_FLAG(int32_t, verify_per_layer, kLoopDefaults.verify_per_layer,
          "rows verified per layer per step");
ABSL_FLAG(uint64_t, seed, kLoopDefaults.seed, "seed of the verification sample");
ABSL_FLAG(absl::Duration, rpc_deadline, engram::ClientOptions().rpc_deadline,
          "ClientOptions::rpc_deadline: the longest one RPC attempt may take");
ABSL_FLAG(absl::Duration, step_deadline, engram::ClientOptions().step_deadline,
          "ClientOptions::step_deadline: the longest a step's layer may take from Prefetch");
// Two deliberate departures from the library defaults, for a latency-bound
// decode loop on a machine the shards share: no HTTP/2 probe pings, and a
// loop thread that stands for an accelerator's timeline.
ABSL_FLAG(bool, http2_bdp_probe, false,
          "ClientOptions::http2_bdp_probe (library default on), for shards without a row "
          "stream (off: no ~10 ms stalls on decode steps)");
ABSL_FLAG(bool, realtime_loop, true,
          "InferenceLoopOptions::realtime (library default off): run the simulated model's "
          "thread under SCHED_FIFO, so CPU contention from the shards cannot stretch its "
          "blocks and hide fetch time");

namespace engram {
namespace {

int Fail(const std::string& line) {
  std::fprintf(stderr, "engram-demo: %s\n", line.c_str());
  return 1;
}

struct TierRows {
  double pinned = 0, cached = 0, disk = 0;
};

TierRows ScrapeTiers(int port) {
  TierRows t;
  absl::StatusOr<scrape::HttpResponse> r = scrape::HttpGet(port, "/metrics");
  if (!r.ok()) return t;
  const std::vector<scrape::Sample> s = scrape::ParseSamples(r->body);
  t.pinned = scrape::SumSamples(s, "engram_shard_rows_total", {{"tier", "pinned"}});
  t.cached = scrape::SumSamples(s, "engram_shard_rows_total", {{"tier", "cached"}});
  t.disk = scrape::SumSamples(s, "engram_shard_rows_total", {{"tier", "disk"}});
  return t;
}

int Run() {
  ClientOptions o;
  o.table_dir = absl::GetFlag(FLAGS_table);
  o.shard_map_path = absl::GetFlag(FLAGS_shard_map);
  o.http2_bdp_probe = absl::GetFlag(FLAGS_http2_bdp_probe);
  o.rpc_deadline = absl::GetFlag(FLAGS_rpc_deadline);
  o.step_deadline = absl::GetFlag(FLAGS_step_deadline);
  if (o.rpc_deadline <= absl::ZeroDuration() || o.step_deadline <= absl::ZeroDuration())
    return Fail("--rpc-deadline and --step-deadline must be positive durations, e.g. 2s");
  // Without --shards, the shard map's replicas.
  if (const std::string shards = absl::GetFlag(FLAGS_shards); !shards.empty()) {
    absl::StatusOr<std::vector<std::vector<std::string>>> addresses = ParseShardAddresses(shards);
    if (!addresses.ok()) return Fail(absl::StrCat("--shards: ", addresses.status().message()));
    o.shard_addresses = *std::move(addresses);
  }
  std::vector<int> metrics_ports;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_metrics_ports), ',', absl::SkipEmpty())) {
    int p;
    if (absl::SimpleAtoi(s, &p)) metrics_ports.push_back(p);
  }
  // The client's engram_client_* series, for a Prometheus scraping this run.
  std::unique_ptr<MetricsExposer> exposer;
  if (const int port = absl::GetFlag(FLAGS_metrics_port); port >= 0) {
    if (port > 65535)
      return Fail(absl::StrCat("--metrics-port ", port, " is not a port (0..65535, -1 = off)"));
    o.metrics_registry = std::make_shared<prometheus::Registry>();
    absl::StatusOr<std::unique_ptr<MetricsExposer>> e =
        MetricsExposer::Start(absl::StrCat("127.0.0.1:", port));
    if (!e.ok()) return Fail(absl::StrCat("--metrics-port: ", e.status().message()));
    exposer = *std::move(e);
    exposer->exposer().RegisterCollectable(o.metrics_registry);
    std::fprintf(stderr, "demo: client metrics on 127.0.0.1:%d\n", exposer->port());
  }
  o.block_time = absl::Microseconds(absl::GetFlag(FLAGS_block_us));  // the layers' need-bys
  absl::StatusOr<std::unique_ptr<EngramClient>> created = EngramClient::Create(o);
  if (!created.ok()) return Fail(std::string(created.status().message()));
  EngramClient& client = **created;
  absl::StatusOr<std::unique_ptr<TableReader>> reader = TableReader::Open(o.table_dir);
  if (!reader.ok()) return Fail(std::string(reader.status().message()));
  absl::StatusOr<TokenTrace> trace = TokenTrace::Load(absl::GetFlag(FLAGS_trace));
  if (!trace.ok()) return Fail(std::string(trace.status().message()));

  InferenceLoopOptions lo;
  lo.trace = &*trace;
  lo.batch = absl::GetFlag(FLAGS_batch);
  lo.prefill = absl::GetFlag(FLAGS_prefill);
  lo.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  lo.decode_steps = absl::GetFlag(FLAGS_decode_steps);
  lo.blocks = absl::GetFlag(FLAGS_blocks);
  lo.block_time = absl::Microseconds(absl::GetFlag(FLAGS_block_us));
  lo.verify_per_layer = absl::GetFlag(FLAGS_verify_per_layer);
  lo.verify_table = reader->get();
  lo.seed = absl::GetFlag(FLAGS_seed);
  lo.realtime = absl::GetFlag(FLAGS_realtime_loop);
  ProgressBar bar("demo");
  lo.progress = [&bar](int done, int total) {
    bar.Update(static_cast<uint64_t>(done), static_cast<uint64_t>(total));
  };
  std::vector<TierRows> before;
  for (int port : metrics_ports) before.push_back(ScrapeTiers(port));
  absl::StatusOr<InferenceLoopResult> run = RunInferenceLoop(client, lo);
  bar.Finish();
  if (!run.ok()) return Fail(std::string(run.status().message()));
  const InferenceLoopResult& r = *run;
  const ClientStats& st = r.client;
  const int B = lo.batch, P = lo.prefill, D = lo.decode_steps;
  const double all_tokens = static_cast<double>(r.all_tokens);

  std::printf("\n%-44s %s\n", "engram-store demo", "");
  std::printf("%-44s %d sequences, prefill %d + %d decode steps, %d blocks x %d us\n", "workload",
              B, P, D, lo.blocks, absl::GetFlag(FLAGS_block_us));
  std::printf("%-44s %s\n", "simulated model thread",
              r.realtime ? "SCHED_FIFO (blocks keep time under CPU contention)"
                         : "normal scheduling (contention may stretch blocks)");
  std::printf("%-44s %.0f\n", "tokens/s (whole run, incl. prefill)", all_tokens / r.run_seconds);
  std::printf("%-44s %.0f\n", "decode tokens/s", r.decode_tokens_per_second());
  std::printf("%-44s %.1f\n", "rows/token before de-duplication",
              static_cast<double>(st.ids) / all_tokens);
  std::printf("%-44s %.1f\n", "rows/token after de-duplication",
              static_cast<double>(st.unique_rows) / all_tokens);
  std::printf("%-44s %.0f (of %llu ids)\n", "unique rows per decode step",
              static_cast<double>(r.decode_unique_rows) / std::max(1, D),
              static_cast<unsigned long long>(r.decode_ids / std::max(1, D)));
  std::printf("%-44s %.0f\n", "bytes/token on the wire (Lookup messages)",
              static_cast<double>(st.bytes_received + st.bytes_sent) / all_tokens);
  std::printf("%-44s %.1f%% / %.1f%% (the rows touched: %.2f%% of the table)\n",
              "lookups hitting the top 1% / 10% rows touched", r.top1_share_pct, r.top10_share_pct,
              r.touched_rows_pct);
  for (size_t s = 0; s < metrics_ports.size(); ++s) {
    const TierRows now = ScrapeTiers(metrics_ports[s]);
    const double pinned = now.pinned - before[s].pinned, cached = now.cached - before[s].cached;
    const double disk = now.disk - before[s].disk, total = pinned + cached + disk;
    std::printf("%-44s %.1f%% (pinned %.1f%%, admitted %.1f%%, disk %.1f%%)\n",
                absl::StrCat("hot-hit ratio, shard ", s).c_str(),
                total > 0 ? 100.0 * (pinned + cached) / total : 0.0,
                total > 0 ? 100.0 * pinned / total : 0.0, total > 0 ? 100.0 * cached / total : 0.0,
                total > 0 ? 100.0 * disk / total : 0.0);
  }
  std::printf("%-44s %.2f / %.2f ms\n", "fetch latency p50 / p99 (decode step)",
              Percentile(r.layer_fetch_ms.back(), 0.50), Percentile(r.layer_fetch_ms.back(), 0.99));
  if (r.prefill_chunks > 0) {
    std::printf("%-44s %.1f%% of %d chunks' time (chunk k + 1 prefetched during chunk k)\n",
                "exposed wait, prefill", r.prefill_exposed_wait_pct, r.prefill_chunks);
  }
  std::printf("%-44s %.2f ms / %.2f ms\n", "prefetch (hash+send) / gather per step",
              1e3 * r.prefetch_seconds / std::max(1, D), 1e3 * r.gather_seconds / std::max(1, D));
  std::printf(
      "%-44s %llu rpcs (%llu answered over the row stream), %llu retries, %llu hedges, "
      "%llu failed\n",
      "client", static_cast<unsigned long long>(st.rpcs),
      static_cast<unsigned long long>(st.stream_answers),
      static_cast<unsigned long long>(st.retries), static_cast<unsigned long long>(st.hedges),
      static_cast<unsigned long long>(st.failed_rpcs));
  std::printf("%-44s %llu rows sampled against %s\n", "verification",
              static_cast<unsigned long long>(r.verified), (*reader)->rows_path().c_str());
  std::printf("demo: %llu rows verified, %llu wrong, exposed wait %.1f%% of step time\n",
              static_cast<unsigned long long>(r.verified), static_cast<unsigned long long>(r.wrong),
              r.exposed_wait_pct);
  return r.wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace engram

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "engram-demo --table DIR --shards host:port,... [--flag=value ...]\n"
      "A simulated inference loop against a running deployment; its last line is\n"
      "  demo: N rows verified, W wrong, exposed wait X.X% of step time\n"
      "Flags may be spelled with dashes or underscores.");
  const std::vector<char*> positional = engram::ParseFlags(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "engram-demo: unexpected argument '%s'; every input is a --flag\n",
                 positional[1]);
    return 2;
  }
  return engram::Run();
}
