#include "inference/inference_loop.h"

#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/codec/row_encoding.h"
#include "common/format/shard_map.h"
#include "common/util/status_macros.h"

namespace engram {
namespace {

void SleepUntil(absl::Time t) {
  const absl::Duration d = t - absl::Now();
  if (d <= absl::ZeroDuration()) return;
  timespec ts = absl::ToTimespec(d);
  nanosleep(&ts, nullptr);
}

// CPU seconds of this process (RUSAGE_SELF) or of the calling thread
// (RUSAGE_THREAD).
double CpuSeconds(int who) {
  rusage u;
  getrusage(who, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Sets the calling thread's timer slack (the kernel's allowance for waking a
// sleeper late, 50 us by default) for the lifetime of the object: a 100 us
// block must not oversleep by half.
class TimerSlack {
 public:
  explicit TimerSlack(unsigned long ns)
      : saved_(static_cast<unsigned long>(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0))) {
    prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0);
  }
  ~TimerSlack() { prctl(PR_SET_TIMERSLACK, saved_, 0, 0, 0); }

 private:
  unsigned long saved_;
};

// Runs the calling thread under SCHED_FIFO for the lifetime of the object
// (when allowed), so the simulated compute ends on time even while the
// shards and the client's threads keep every core busy.
class RealtimeScope {
 public:
  explicit RealtimeScope(bool want) {
    if (!want) return;
    pthread_getschedparam(pthread_self(), &saved_policy_, &saved_);
    sched_param p{};
    p.sched_priority = 1;
    active_ = pthread_setschedparam(pthread_self(), SCHED_FIFO, &p) == 0;
  }
  ~RealtimeScope() {
    if (active_) pthread_setschedparam(pthread_self(), saved_policy_, &saved_);
  }
  bool active() const { return active_; }

 private:
  bool active_ = false;
  int saved_policy_ = SCHED_OTHER;
  sched_param saved_{};
};

absl::Status Validate(const EngramClient& client, const InferenceLoopOptions& o) {
  if (o.trace == nullptr || o.trace->size() == 0) {
    return absl::InvalidArgumentError("the inference loop needs a non-empty token trace");
  }
  if (o.batch <= 0 || o.prefill < 0 || o.decode_steps < 0 || o.blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch (", o.batch, ") and blocks (", o.blocks, ") must be positive, prefill (", o.prefill,
        ") and decode steps (", o.decode_steps, ") not negative"));
  }
  if (o.prefill_chunk < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefill_chunk (", o.prefill_chunk, ") must not be negative"));
  }
  if (o.block_time < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("block_time must not be negative");
  }
  if (o.trace->size() < static_cast<size_t>(o.prefill + o.decode_steps)) {
    return absl::InvalidArgumentError(absl::StrCat("the trace (", o.trace->size(),
                                                   " tokens) is shorter than one sequence (",
                                                   o.prefill + o.decode_steps, " tokens)"));
  }
  if (o.verify_per_layer > 0 && o.verify_table == nullptr) {
    return absl::InvalidArgumentError("verify_per_layer needs verify_table");
  }
  if (!o.layer_blocks.empty() && o.layer_blocks.size() != static_cast<size_t>(client.n_layers())) {
    return absl::InvalidArgumentError(absl::StrCat("layer_blocks has ", o.layer_blocks.size(),
                                                   " entries; the table has ", client.n_layers(),
                                                   " Engram layers"));
  }
  const std::vector<int64_t>& blocks =
      o.layer_blocks.empty() ? client.layout().engram_layer_ids : o.layer_blocks;
  for (int64_t b : blocks) {
    if (b < 0 || b >= o.blocks) {
      return absl::InvalidArgumentError(
          absl::StrCat("Engram layer at block ", b, " is past --blocks ", o.blocks));
    }
  }
  return absl::OkStatus();
}

// One run's state: the sequences, the output buffers and the sums.
class Loop {
 public:
  Loop(EngramClient& client, const InferenceLoopOptions& o)
      : client_(client),
        o_(o),
        layer_blocks_(o.layer_blocks.empty() ? client.layout().engram_layer_ids : o.layer_blocks),
        rng_(o.seed),
        out_(static_cast<size_t>(client.n_layers())),
        layer_exposed_(static_cast<size_t>(client.n_layers())) {
    for (int b = 0; b < o.batch; ++b) {
      seqs_.push_back(client.NewSequence());
      ptrs_.push_back(seqs_.back().get());
    }
    r_.layer_fetch_ms.resize(static_cast<size_t>(client.n_layers()));
  }

  absl::StatusOr<InferenceLoopResult> Run();

 private:
  // One step's tokens, prefetched: the step, its tokens per sequence, and
  // when its Prefetch began and returned.
  struct Prefetched {
    Step step;
    int tokens = 0;
    absl::Time begin, end;
  };
  // Prefetches T tokens per sequence from position pos0.
  absl::StatusOr<Prefetched> Prefetch(size_t pos0, int T);
  // Runs a prefetched step's blocks, waiting for each layer at its block;
  // `next` (may be empty) runs as its compute begins.
  absl::Status Compute(Prefetched& p, bool prefill, const std::function<absl::Status()>& next);
  absl::Status RunPrefill();
  void Verify(Step& step, int64_t tokens);
  void CountRows(const Step& step);
  void FinishSkew();

  EngramClient& client_;
  const InferenceLoopOptions& o_;
  const std::vector<int64_t> layer_blocks_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
  std::vector<Sequence*> ptrs_;
  std::mt19937_64 rng_;
  std::vector<int64_t> ids_, starts_;
  std::vector<std::vector<uint8_t>> out_;
  std::vector<uint8_t> want_;
  std::vector<uint16_t> want_bf16_;
  std::vector<float> want_f32_;
  absl::flat_hash_map<uint64_t, uint32_t> counts_;
  uint64_t lookups_ = 0;
  std::vector<absl::Duration> layer_exposed_;
  absl::Duration exposed_, prefill_exposed_, prefetch_, gather_, late_;
  double bookkeeping_cpu_ = 0;  // Verify and CountRows, since the decode steps began
  InferenceLoopResult r_;
};

absl::StatusOr<Loop::Prefetched> Loop::Prefetch(size_t pos0, int T) {
  const int B = o_.batch;
  ids_.resize(static_cast<size_t>(B) * T);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      ids_[static_cast<size_t>(b) * T + t] = o_.trace->Token(b, B, pos0 + t);
    }
  }
  starts_.assign(static_cast<size_t>(B), static_cast<int64_t>(pos0));
  const absl::Time begin = absl::Now();
  ASSIGN_OR_RETURN(Step step, client_.Prefetch({ptrs_, starts_, T, ids_, {}}));
  return Prefetched{std::move(step), T, begin, absl::Now()};
}

absl::Status Loop::Compute(Prefetched& p, bool prefill, const std::function<absl::Status()>& next) {
  const int L = client_.n_layers(), C = client_.n_cols(), B = o_.batch;
  Step& step = p.step;
  // A decode step's time runs from its Prefetch; a prefill chunk's (fetched
  // during the chunk before) from its compute.
  const absl::Time t0 = prefill ? absl::Now() : p.begin;
  if (next) RETURN_IF_ERROR(next());
  absl::Time block_end = absl::Now();
  std::vector<absl::Duration> exposed(static_cast<size_t>(L));
  absl::Duration gather, late;
  for (int blk = 0; blk < o_.blocks; ++blk) {
    for (int l = 0; l < L; ++l) {
      if (layer_blocks_[l] != blk) continue;
      const absl::Time w0 = absl::Now();
      RETURN_IF_ERROR(step.WaitArrived(l));
      const absl::Time w1 = absl::Now();
      exposed[l] += w1 - w0;
      out_[l].resize(static_cast<size_t>(B) * p.tokens * C * client_.OutputRowBytes(l, o_.format));
      RETURN_IF_ERROR(step.Wait(l, o_.format, out_[l]));
      const absl::Time w2 = absl::Now();
      gather += w2 - w1;
      block_end = std::max(block_end, w2);
    }
    block_end += o_.block_time;
    SleepUntil(block_end);
    late += std::max(absl::ZeroDuration(), absl::Now() - block_end);
  }
  const absl::Time t2 = absl::Now();
  const double book0 = CpuSeconds(RUSAGE_THREAD);
  if (o_.verify_per_layer > 0) Verify(step, p.tokens);
  if (o_.measure_skew) CountRows(step);
  bookkeeping_cpu_ += CpuSeconds(RUSAGE_THREAD) - book0;
  if (prefill) {
    ++r_.prefill_chunks;
    r_.prefill_seconds += absl::ToDoubleSeconds(t2 - t0);
    for (int l = 0; l < L; ++l) prefill_exposed_ += exposed[l];
    return absl::OkStatus();
  }
  ++r_.decode_steps;
  r_.decode_ids += step.row_ids().size();
  r_.decode_unique_rows += step.unique_rows();
  for (int l = 0; l < L; ++l) {
    layer_exposed_[l] += exposed[l];
    exposed_ += exposed[l];
    r_.layer_fetch_ms[l].push_back(absl::ToDoubleMilliseconds(step.FetchLatency(l)));
  }
  r_.decode_seconds += absl::ToDoubleSeconds(t2 - t0);
  prefetch_ += p.end - p.begin;
  gather_ += gather;
  late_ += late;
  r_.step_ms.push_back(absl::ToDoubleMilliseconds(t2 - t0));
  return absl::OkStatus();
}

// The prefill in chunks: chunk k + 1 is prefetched as chunk k's compute
// begins.
absl::Status Loop::RunPrefill() {
  const int chunk = PrefillChunkTokens(o_);
  ASSIGN_OR_RETURN(Prefetched current, Prefetch(0, chunk));
  for (int pos = 0; pos < o_.prefill;) {
    const int next_pos = pos + current.tokens;
    std::optional<Prefetched> next;
    std::function<absl::Status()> fetch_next;
    if (next_pos < o_.prefill) {
      fetch_next = [&]() -> absl::Status {
        ASSIGN_OR_RETURN(Prefetched n, Prefetch(static_cast<size_t>(next_pos),
                                                std::min(chunk, o_.prefill - next_pos)));
        next.emplace(std::move(n));
        return absl::OkStatus();
      };
    }
    if (absl::Status s = Compute(current, /*prefill=*/true, fetch_next); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("prefill chunk at token ", pos, ": ", s.message()));
    }
    pos = next_pos;
    if (!next.has_value()) break;
    current = std::move(*next);
  }
  return absl::OkStatus();
}

// Checks a sample of each layer's output rows against the table file,
// dequantised the way Wait wrote them.
void Loop::Verify(Step& step, int64_t tokens) {
  const int L = client_.n_layers(), C = client_.n_cols();
  const std::span<const RowId> row_ids = step.row_ids();
  const size_t positions = static_cast<size_t>(o_.batch) * static_cast<size_t>(tokens);
  for (int l = 0; l < L; ++l) {
    const LayerInfo& info = o_.verify_table->manifest().layers[l];
    const size_t orb = client_.OutputRowBytes(l, o_.format);
    want_.resize(static_cast<size_t>(info.row_bytes));
    want_bf16_.resize(static_cast<size_t>(info.head_dim));
    want_f32_.resize(static_cast<size_t>(info.head_dim));
    for (int k = 0; k < o_.verify_per_layer; ++k) {
      const size_t i = rng_() % (positions * C);
      const size_t p = i / C, c = i % C;
      const RowId row = row_ids[(p * L + l) * C + c];
      ++r_.verified;
      if (!o_.verify_table->ReadRow(l, row, want_.data()).ok()) {
        ++r_.wrong;
        continue;
      }
      const void* expect = want_.data();
      if (o_.format == RowFormat::kBf16) {
        DecodeRows(info.encoding, want_.data(), 1, info.head_dim, info.scale_block,
                   want_bf16_.data());
        expect = want_bf16_.data();
      } else if (o_.format == RowFormat::kF32) {
        DecodeRows(info.encoding, want_.data(), 1, info.head_dim, info.scale_block,
                   want_f32_.data());
        expect = want_f32_.data();
      }
      if (std::memcmp(out_[l].data() + i * orb, expect, orb) != 0) ++r_.wrong;
    }
  }
}

void Loop::CountRows(const Step& step) {
  const std::span<const RowId> row_ids = step.row_ids();
  const size_t C = static_cast<size_t>(client_.n_cols());
  const size_t L = static_cast<size_t>(client_.n_layers());
  for (size_t i = 0; i < row_ids.size(); ++i) {
    const uint64_t layer = (i / C) % L;
    ++counts_[ShardKey(static_cast<uint32_t>(layer), row_ids[i])];
  }
  lookups_ += row_ids.size();
}

// The share of lookups that hit the 1% / 10% most frequent rows the run
// touched, and how much of the table those rows are.
void Loop::FinishSkew() {
  std::vector<uint32_t> freq;
  freq.reserve(counts_.size());
  for (const auto& [key, n] : counts_) freq.push_back(n);
  std::sort(freq.rbegin(), freq.rend());
  uint64_t table_rows = 0;
  for (int64_t rows : client_.layout().table_rows) table_rows += static_cast<uint64_t>(rows);
  auto top_share = [&](double frac) {
    const size_t k =
        std::max<size_t>(1, static_cast<size_t>(frac * static_cast<double>(freq.size())));
    uint64_t s = 0;
    for (size_t i = 0; i < std::min(k, freq.size()); ++i) s += freq[i];
    return 100.0 * static_cast<double>(s) / static_cast<double>(std::max<uint64_t>(1, lookups_));
  };
  r_.touched_rows_pct = 100.0 * static_cast<double>(freq.size()) /
                        static_cast<double>(std::max<uint64_t>(1, table_rows));
  r_.top1_share_pct = top_share(0.01);
  r_.top10_share_pct = top_share(0.10);
}

absl::StatusOr<InferenceLoopResult> Loop::Run() {
  TimerSlack slack(1);
  RealtimeScope realtime(o_.realtime);
  r_.realtime = realtime.active();
  const int chunks = PrefillChunks(o_);
  const int planned = chunks + o_.decode_steps;
  const absl::Time start = absl::Now();
  if (o_.prefill > 0) RETURN_IF_ERROR(RunPrefill());
  if (o_.progress && chunks > 0) o_.progress(chunks, planned);
  const double cpu_start = CpuSeconds(RUSAGE_SELF);
  bookkeeping_cpu_ = 0;
  for (int d = 0; d < o_.decode_steps; ++d) {
    if ((chunks > 0 || d > 0) && absl::Now() - start > o_.max_run_time) break;
    absl::StatusOr<Prefetched> p = Prefetch(static_cast<size_t>(o_.prefill + d), 1);
    absl::Status s = p.ok() ? Compute(*p, /*prefill=*/false, nullptr) : p.status();
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("step ", chunks + d, ": ", s.message()));
    }
    if (o_.progress) o_.progress(chunks + d + 1, planned);
  }
  r_.decode_cpu_seconds = CpuSeconds(RUSAGE_SELF) - cpu_start - bookkeeping_cpu_;
  r_.run_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  r_.all_tokens = static_cast<int64_t>(o_.batch) *
                  (o_.prefill > 0 ? o_.prefill + r_.decode_steps : r_.decode_steps);
  const double step_s = r_.decode_seconds;
  auto pct = [&](absl::Duration d) {
    return step_s > 0 ? 100.0 * absl::ToDoubleSeconds(d) / step_s : 0.0;
  };
  r_.batch = o_.batch;
  r_.prefill_exposed_wait_seconds = absl::ToDoubleSeconds(prefill_exposed_);
  r_.prefill_exposed_wait_pct =
      r_.prefill_seconds > 0 ? 100.0 * r_.prefill_exposed_wait_seconds / r_.prefill_seconds : 0.0;
  r_.exposed_wait_seconds = absl::ToDoubleSeconds(exposed_);
  r_.exposed_wait_pct = pct(exposed_);
  for (absl::Duration d : layer_exposed_) r_.layer_exposed_wait_pct.push_back(pct(d));
  r_.prefetch_seconds = absl::ToDoubleSeconds(prefetch_);
  r_.gather_seconds = absl::ToDoubleSeconds(gather_);
  r_.late_wake_seconds = absl::ToDoubleSeconds(late_);
  if (o_.measure_skew) FinishSkew();
  r_.client = client_.stats();
  return std::move(r_);
}

}  // namespace

absl::StatusOr<TokenTrace> TokenTrace::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open trace " + path);
  std::vector<int64_t> tokens;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    for (absl::string_view t : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      int64_t id;
      if (!absl::SimpleAtoi(t, &id) || id < 0) {
        return absl::InvalidArgumentError(absl::StrCat("trace ", path, " line ", line_no, ": '",
                                                       std::string(t), "' is not a token id"));
      }
      tokens.push_back(id);
    }
  }
  if (tokens.empty()) return absl::InvalidArgumentError("trace " + path + " has no tokens");
  return TokenTrace(std::move(tokens));
}

int64_t TokenTrace::Token(int sequence, int batch, size_t position) const {
  const size_t stride = std::max<size_t>(1, tokens_.size() / static_cast<size_t>(batch));
  return tokens_[(static_cast<size_t>(sequence) * stride + position) % tokens_.size()];
}

int PrefillChunkTokens(const InferenceLoopOptions& o) {
  return o.prefill_chunk > 0 ? std::min(o.prefill_chunk, o.prefill) : o.prefill;
}

int PrefillChunks(const InferenceLoopOptions& o) {
  return o.prefill > 0 ? (o.prefill + PrefillChunkTokens(o) - 1) / PrefillChunkTokens(o) : 0;
}

double InferenceLoopResult::decode_tokens_per_second() const {
  return decode_seconds > 0 ? static_cast<double>(decode_steps) * batch / decode_seconds : 0;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

absl::StatusOr<InferenceLoopResult> RunInferenceLoop(EngramClient& client,
                                                     const InferenceLoopOptions& options) {
  RETURN_IF_ERROR(Validate(client, options));
  Loop loop(client, options);
  return loop.Run();
}

}  // namespace engram
