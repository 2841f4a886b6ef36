// engram-bench-hash: row ids hashed per second on one core, for a decode step
// (B=256, T=1) and a prefill (B=1, T=8192) with the v41 layout (2 Engram
// layers x 24 columns), with the precomputed fast modulo and with the plain
// hardware divide the reference uses, in one run.
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/gen/table_gen.h"
#include "common/hash/engram_hash.h"

namespace {

using engram::HasherOptions;

const engram::HashLayout& V41Layout() {
  static const engram::HashLayout* layout = [] {
    engram::GenTableOptions opts;
    opts.preset = "v41";
    absl::StatusOr<engram::HashLayout> l = engram::BuildPresetLayout(opts);
    if (!l.ok()) {
      std::fprintf(stderr, "engram-bench-hash: %s\n", l.status().ToString().c_str());
      std::exit(1);
    }
    return new engram::HashLayout(*std::move(l));
  }();
  return *layout;
}

// Zipf-free uniform token ids: the hash cost does not depend on the values.
std::vector<int64_t> Tokens(size_t n, int64_t vocab) {
  std::mt19937_64 rng(42);
  std::vector<int64_t> ids(n);
  for (auto& id : ids) id = static_cast<int64_t>(rng() % vocab);
  return ids;
}

void Run(benchmark::State& state, HasherOptions::Modulo modulo, int B, int T, int history) {
  auto hasher = engram::NgramHasher::Create(V41Layout(), {modulo});
  if (!hasher.ok()) {
    state.SkipWithError(hasher.status().ToString().c_str());
    return;
  }
  const engram::NgramHasher& h = **hasher;
  std::vector<std::unique_ptr<engram::SequenceState>> seqs;
  std::vector<engram::SequenceState*> batch;
  for (int b = 0; b < B; ++b) {
    seqs.push_back(std::make_unique<engram::SequenceState>());
    batch.push_back(seqs.back().get());
  }
  const int64_t vocab = V41Layout().vocab_size;
  std::vector<engram::RowId> out(static_cast<size_t>(B) * T * h.ids_per_position());
  if (history > 0) {  // a prefill that decode steps look back into
    std::vector<int64_t> pre = Tokens(static_cast<size_t>(B) * history, vocab);
    std::vector<engram::RowId> pre_out(pre.size() * h.ids_per_position());
    if (!h.HashBatch(batch, 0, history, pre.data(), nullptr, pre_out.data()).ok()) {
      state.SkipWithError("prefill failed");
      return;
    }
  }
  const std::vector<int64_t> ids = Tokens(static_cast<size_t>(B) * T, vocab);
  for (auto _ : state) {
    // Decode steps rewrite position `history` each time (start_pos <= length).
    absl::Status s = h.HashBatch(batch, history, T, ids.data(), nullptr, out.data());
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double ids_per_iter = static_cast<double>(out.size());
  state.counters["ids_per_second"] = benchmark::Counter(
      ids_per_iter * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["ids_per_step"] = ids_per_iter;
}

void BM_DecodeB256_FastMod(benchmark::State& s) {
  Run(s, HasherOptions::Modulo::kFast, 256, 1, 64);
}
void BM_DecodeB256_PlainMod(benchmark::State& s) {
  Run(s, HasherOptions::Modulo::kDivide, 256, 1, 64);
}
void BM_PrefillT8192_FastMod(benchmark::State& s) {
  Run(s, HasherOptions::Modulo::kFast, 1, 8192, 0);
}
void BM_PrefillT8192_PlainMod(benchmark::State& s) {
  Run(s, HasherOptions::Modulo::kDivide, 1, 8192, 0);
}

BENCHMARK(BM_DecodeB256_FastMod);
BENCHMARK(BM_DecodeB256_PlainMod);
BENCHMARK(BM_PrefillT8192_FastMod);
BENCHMARK(BM_PrefillT8192_PlainMod);

}  // namespace

BENCHMARK_MAIN();
