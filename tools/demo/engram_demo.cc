// engram-demo: a simulated inference loop against a running deployment.
//
// Batch B sequences read a token trace (prefill, then decode steps). At
// token time each step is prefetched through the client library; then
// `--blocks` transformer blocks of `--block-us` simulated compute run, and
// at each Engram layer's block the loop waits for that layer's rows. It
// verifies a sample of the returned rows against the table file and prints
// a summary whose last line is exactly
//   demo: N rows verified, W wrong, exposed wait X.X% of step time
// Exit 0 only when W == 0 and nothing failed.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/engram_client.h"
#include "common/fp8.h"
#include "common/metrics/scrape.h"
#include "common/table.h"
#include "tools/progress.h"

ABSL_FLAG(std::string, table, "", "table directory (manifest.json, rows.safetensors)");
ABSL_FLAG(std::string, shard_map, "", "shard_map.json of the deployment");
ABSL_FLAG(std::string, shards, "", "shard addresses, shard 0 first: host:port,...");
ABSL_FLAG(std::string, metrics_ports, "", "the shards' /metrics ports, same order");
ABSL_FLAG(std::string, trace, "", "token trace: one sequence per line");
ABSL_FLAG(int32_t, batch, 64, "sequences per step");
ABSL_FLAG(int32_t, prefill, 128, "prefill tokens per sequence");
ABSL_FLAG(int32_t, decode_steps, 150, "decode steps after the prefill");
ABSL_FLAG(int32_t, blocks, 40, "simulated transformer blocks per step");
ABSL_FLAG(int32_t, block_us, 500, "simulated compute per block, microseconds");
ABSL_FLAG(int32_t, verify_per_layer, 64, "rows verified per layer per step");
ABSL_FLAG(uint64_t, seed, 1, "seed of the verification sample");

namespace engram {
namespace {

int Fail(const std::string& line) {
  std::fprintf(stderr, "engram-demo: %s\n", line.c_str());
  return 1;
}

// All tokens of the trace, concatenated (documents follow each other).
absl::StatusOr<std::vector<int64_t>> ReadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open trace " + path);
  std::vector<int64_t> out;
  std::string line;
  while (std::getline(in, line)) {
    for (absl::string_view t : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      int64_t id;
      if (!absl::SimpleAtoi(t, &id)) return absl::InvalidArgumentError("bad token in trace");
      out.push_back(id);
    }
  }
  return out;
}

void SleepUntil(absl::Time t) {
  const absl::Duration d = t - absl::Now();
  if (d <= absl::ZeroDuration()) return;
  timespec ts = absl::ToTimespec(d);
  nanosleep(&ts, nullptr);
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

struct TierRows {
  double pinned = 0, cached = 0, disk = 0;
};

TierRows ScrapeTiers(int port) {
  TierRows t;
  absl::StatusOr<metrics::HttpResponse> r = metrics::HttpGet(port, "/metrics");
  if (!r.ok()) return t;
  const std::vector<metrics::Sample> s = metrics::ParseSamples(r->body);
  t.pinned = metrics::SumSamples(s, "engram_shard_rows_total", {{"tier", "pinned"}});
  t.cached = metrics::SumSamples(s, "engram_shard_rows_total", {{"tier", "cached"}});
  t.disk = metrics::SumSamples(s, "engram_shard_rows_total", {{"tier", "disk"}});
  return t;
}

int Run() {
  ClientOptions o;
  o.table_dir = absl::GetFlag(FLAGS_table);
  o.shard_map_path = absl::GetFlag(FLAGS_shard_map);
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_shards), ',', absl::SkipEmpty())) {
    o.shard_addresses.push_back(absl::StrSplit(s, '|', absl::SkipEmpty()));
  }
  std::vector<int> metrics_ports;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_metrics_ports), ',', absl::SkipEmpty())) {
    int p;
    if (absl::SimpleAtoi(s, &p)) metrics_ports.push_back(p);
  }
  absl::StatusOr<std::unique_ptr<EngramClient>> created = EngramClient::Create(o);
  if (!created.ok()) return Fail(std::string(created.status().message()));
  EngramClient& client = **created;
  absl::StatusOr<std::unique_ptr<TableReader>> reader = TableReader::Open(o.table_dir);
  if (!reader.ok()) return Fail(std::string(reader.status().message()));
  absl::StatusOr<std::vector<int64_t>> trace = ReadTrace(absl::GetFlag(FLAGS_trace));
  if (!trace.ok()) return Fail(std::string(trace.status().message()));

  const int B = absl::GetFlag(FLAGS_batch), P = absl::GetFlag(FLAGS_prefill);
  const int D = absl::GetFlag(FLAGS_decode_steps), blocks = absl::GetFlag(FLAGS_blocks);
  const absl::Duration block = absl::Microseconds(absl::GetFlag(FLAGS_block_us));
  const int L = client.n_layers(), C = client.n_cols();
  const std::vector<int64_t>& layer_ids = client.layout().engram_layer_ids;
  for (int64_t id : layer_ids) {
    if (id >= blocks) return Fail(absl::StrCat("Engram layer ", id, " is past --blocks ", blocks));
  }
  const size_t per_seq = static_cast<size_t>(P + D);
  if (trace->size() < per_seq) return Fail("the trace is shorter than one sequence");
  // Sequence b reads the trace from an offset of its own (wrapping).
  const size_t stride = std::max<size_t>(1, trace->size() / static_cast<size_t>(B));
  auto token = [&](int b, size_t pos) {
    return (*trace)[(static_cast<size_t>(b) * stride + pos) % trace->size()];
  };
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<Sequence*> ptrs;
  for (int b = 0; b < B; ++b) {
    seqs.push_back(client.NewSequence());
    ptrs.push_back(seqs.back().get());
  }
  std::vector<TierRows> before;
  for (int port : metrics_ports) before.push_back(ScrapeTiers(port));

  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(L));
  std::vector<uint8_t> want;
  std::vector<uint16_t> want_bf16;
  uint64_t verified = 0, wrong = 0, decode_tokens = 0, decode_unique = 0, decode_ids = 0;
  absl::Duration exposed, step_total, prefetch_total, gather_total;
  std::vector<double> fetch_ms;
  absl::flat_hash_map<uint64_t, uint32_t> counts;
  uint64_t lookups = 0;
  ProgressBar bar("demo");
  const absl::Time run_start = absl::Now();
  for (int step_no = 0; step_no <= D; ++step_no) {
    const bool prefill = step_no == 0;
    const int T = prefill ? P : 1;
    const size_t pos0 = prefill ? 0 : static_cast<size_t>(P + step_no - 1);
    std::vector<int64_t> ids(static_cast<size_t>(B) * T);
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) ids[static_cast<size_t>(b) * T + t] = token(b, pos0 + t);
    }
    std::vector<int64_t> starts(static_cast<size_t>(B), static_cast<int64_t>(pos0));
    const absl::Time t0 = absl::Now();
    absl::StatusOr<Step> step = client.Prefetch({ptrs, starts, T, ids, {}});
    if (!step.ok()) return Fail(absl::StrCat("prefetch: ", step.status().message()));
    const absl::Time t1 = absl::Now();
    absl::Time block_end = t1;
    absl::Duration step_exposed;
    for (int blk = 0; blk < blocks; ++blk) {
      for (int l = 0; l < L; ++l) {
        if (layer_ids[l] != blk) continue;
        const absl::Time w0 = absl::Now();
        if (absl::Status s = step->WaitArrived(l); !s.ok()) {
          return Fail(absl::StrCat("step ", step_no, ": ", s.message()));
        }
        const absl::Time w1 = absl::Now();
        step_exposed += w1 - w0;
        out[l].resize(static_cast<size_t>(B) * T * C * client.OutputRowBytes(l, RowFormat::kBf16));
        if (absl::Status s = step->Wait(l, RowFormat::kBf16, out[l]); !s.ok()) {
          return Fail(absl::StrCat("step ", step_no, ": ", s.message()));
        }
        gather_total += absl::Now() - w1;
        block_end = std::max(block_end, absl::Now());
      }
      block_end += block;
      SleepUntil(block_end);
    }
    const absl::Time t2 = absl::Now();
    // Verify a sample of rows of every layer against the table file.
    const std::span<const RowId> row_ids = step->row_ids();
    const size_t positions = static_cast<size_t>(B) * T;
    for (int l = 0; l < L; ++l) {
      const LayerInfo& info = (*reader)->manifest().layers[l];
      want.resize(static_cast<size_t>(info.row_bytes));
      want_bf16.resize(static_cast<size_t>(info.head_dim));
      for (int k = 0; k < absl::GetFlag(FLAGS_verify_per_layer); ++k) {
        const size_t i = rng() % (positions * C);
        const size_t p = i / C, c = i % C;
        const RowId row = row_ids[(p * L + l) * C + c];
        ++verified;
        if (!(*reader)->ReadRow(l, row, want.data()).ok()) {
          ++wrong;
          continue;
        }
        fp8::DequantizeRowsBf16(want.data(), 1, info.head_dim, info.scale_block, want_bf16.data());
        if (std::memcmp(out[l].data() + i * info.head_dim * 2, want_bf16.data(),
                        static_cast<size_t>(info.head_dim) * 2) != 0) {
          ++wrong;
        }
      }
    }
    for (size_t i = 0; i < row_ids.size(); ++i) {
      const uint64_t layer = (i / C) % static_cast<size_t>(L);
      ++counts[(layer << 48) | row_ids[i]];
    }
    lookups += row_ids.size();
    if (!prefill) {
      decode_tokens += static_cast<uint64_t>(B);
      decode_unique += step->unique_rows();
      decode_ids += row_ids.size();
      exposed += step_exposed;
      step_total += t2 - t0;
      prefetch_total += t1 - t0;
      fetch_ms.push_back(absl::ToDoubleMilliseconds(step->FetchLatency(L - 1)));
    }
    bar.Update(static_cast<uint64_t>(step_no + 1), static_cast<uint64_t>(D + 1));
  }
  bar.Finish();
  const double run_s = absl::ToDoubleSeconds(absl::Now() - run_start);
  const ClientStats st = client.stats();

  // Skew of the row traffic: the share of lookups that hit the 1% / 10%
  // most frequent rows of the table.
  std::vector<uint32_t> freq;
  freq.reserve(counts.size());
  for (const auto& [k, n] : counts) freq.push_back(n);
  std::sort(freq.rbegin(), freq.rend());
  uint64_t table_rows = 0;
  for (const LayerInfo& l : (*reader)->manifest().layers) table_rows += l.rows;
  auto top_share = [&](double frac) {
    const size_t k = std::min(freq.size(), static_cast<size_t>(frac * static_cast<double>(table_rows)));
    uint64_t s = 0;
    for (size_t i = 0; i < k; ++i) s += freq[i];
    return 100.0 * static_cast<double>(s) / static_cast<double>(std::max<uint64_t>(1, lookups));
  };

  const double step_s = absl::ToDoubleSeconds(step_total);
  const double exposed_pct = step_s > 0 ? 100.0 * absl::ToDoubleSeconds(exposed) / step_s : 0;
  const double all_tokens = static_cast<double>(B) * (P + D);
  std::printf("\n%-44s %s\n", "engram-store demo", "");
  std::printf("%-44s %d sequences, prefill %d + %d decode steps, %d blocks x %d us\n",
              "workload", B, P, D, blocks, absl::GetFlag(FLAGS_block_us));
  std::printf("%-44s %.0f\n", "tokens/s (whole run, incl. prefill)", all_tokens / run_s);
  std::printf("%-44s %.0f\n", "decode tokens/s",
              static_cast<double>(decode_tokens) / std::max(1e-9, step_s));
  std::printf("%-44s %.1f\n", "rows/token before de-duplication",
              static_cast<double>(st.ids) / all_tokens);
  std::printf("%-44s %.1f\n", "rows/token after de-duplication",
              static_cast<double>(st.unique_rows) / all_tokens);
  std::printf("%-44s %.0f (of %llu ids)\n", "unique rows per decode step",
              static_cast<double>(decode_unique) / std::max(1, D),
              static_cast<unsigned long long>(decode_ids / std::max(1, D)));
  std::printf("%-44s %.0f\n", "bytes/token on the wire (gRPC payload)",
              static_cast<double>(st.bytes_received + st.bytes_sent) / all_tokens);
  std::printf("%-44s %.1f%% / %.1f%%\n", "lookups hitting the top 1% / 10% rows",
              top_share(0.01), top_share(0.10));
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
              Percentile(fetch_ms, 0.50), Percentile(fetch_ms, 0.99));
  std::printf("%-44s %.2f ms / %.2f ms\n", "prefetch (hash+send) / gather per step",
              absl::ToDoubleMilliseconds(prefetch_total) / std::max(1, D),
              absl::ToDoubleMilliseconds(gather_total) / (D + 1));
  std::printf("%-44s %llu rpcs, %llu retries, %llu hedges, %llu failed\n", "client",
              static_cast<unsigned long long>(st.rpcs), static_cast<unsigned long long>(st.retries),
              static_cast<unsigned long long>(st.hedges),
              static_cast<unsigned long long>(st.failed_rpcs));
  std::printf("%-44s %llu rows sampled against %s\n", "verification",
              static_cast<unsigned long long>(verified), (*reader)->rows_path().c_str());
  std::printf("demo: %llu rows verified, %llu wrong, exposed wait %.1f%% of step time\n",
              static_cast<unsigned long long>(verified), static_cast<unsigned long long>(wrong),
              exposed_pct);
  return wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace engram

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return engram::Run();
}
