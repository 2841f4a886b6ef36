// A simulated inference loop over the client library, shared by engram-demo
// and engram-bench-client.
//
// A batch of sequences reads a token trace: a prefill of `prefill` tokens
// per sequence, in chunks of `prefill_chunk`, then `decode_steps` steps of
// one token. Each step is prefetched through EngramClient at token time;
// then `blocks` transformer blocks of `block_time` simulated compute run
// (the thread sleeps, as a host thread does while an accelerator computes),
// and at each Engram layer's block the loop blocks in Step::WaitArrived for
// that layer's rows, then gathers them with Step::Wait. The time spent
// blocked in WaitArrived is the exposed wait; it is reported as a share of
// step time, for decode steps and for prefill chunks separately.
//
// A prefill's tokens are all known up front, so chunk k + 1 is prefetched
// as chunk k's compute begins (EngramClient's chunked-prefill pattern): its
// rows arrive while chunk k computes. Only the first chunk's fetch has
// nothing to hide behind.
//
//   TokenTrace trace = *TokenTrace::Load("workload.trace");
//   InferenceLoopOptions o;
//   o.trace = &trace;
//   o.verify_table = reader.get();
//   absl::StatusOr<InferenceLoopResult> r = RunInferenceLoop(*client, o);
//
// Threading: RunInferenceLoop runs on the calling thread (it sets that
// thread's timer slack to 1 ns while it runs, so sleeps end on time, and
// optionally its scheduling policy, see `realtime`) and
// uses the client as one worker would; nothing else may use the sequences it
// creates. Everything it returns is a plain value.
#ifndef ENGRAM_INFERENCE_INFERENCE_LOOP_H_
#define ENGRAM_INFERENCE_INFERENCE_LOOP_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/engram_client.h"
#include "common/format/table.h"

namespace engram {

// The tokens of a trace file (one sequence per line, space-separated ids),
// concatenated: documents follow each other. Immutable once loaded.
class TokenTrace {
 public:
  // NotFound when the file cannot be opened, InvalidArgument (naming the
  // line) for a token that is not a non-negative integer, or an empty trace.
  static absl::StatusOr<TokenTrace> Load(const std::string& path);
  explicit TokenTrace(std::vector<int64_t> tokens) : tokens_(std::move(tokens)) {}

  size_t size() const { return tokens_.size(); }
  // Token `position` of sequence `sequence` of a batch of `batch`: each
  // sequence reads the trace from an offset of its own (size / batch apart),
  // wrapping at the end. REQUIRES: size() > 0.
  int64_t Token(int sequence, int batch, size_t position) const;

 private:
  std::vector<int64_t> tokens_;
};

struct InferenceLoopOptions {
  // The token source. REQUIRED; at least prefill + decode_steps tokens.
  const TokenTrace* trace = nullptr;
  int batch = 64;     // sequences per step
  int prefill = 128;  // prefill tokens per sequence; 0 = none
  // Tokens per sequence in one prefill chunk (a step of its own); 0 = the
  // whole prefill in one chunk.
  int prefill_chunk = 0;
  int decode_steps = 150;  // one-token steps after the prefill
  int blocks = 40;         // simulated transformer blocks per step
  // Simulated compute per block; zero = none (the loop then measures the
  // client back to back: each step is prefetch, then wait for every layer).
  // Give the client the same (ClientOptions::block_time), so the need-bys
  // it sends the shards match the loop's blocks.
  absl::Duration block_time = absl::Microseconds(500);
  // The block at which each Engram layer's rows are needed, one per client
  // layer; empty = the layout's engram_layer_ids. Each must be < blocks.
  std::vector<int64_t> layer_blocks;
  // How Wait writes the rows (kBf16, as a model consumes them).
  RowFormat format = RowFormat::kBf16;
  // Rows per layer per step checked against `verify_table` (the table the
  // shards were imported from); 0 = no verification.
  int verify_per_layer = 64;
  const TableReader* verify_table = nullptr;  // REQUIRED when verifying
  uint64_t seed = 1;                          // of the verification sample
  // Count every looked-up row to report the skew of the traffic (a hash map
  // over the run's distinct rows).
  bool measure_skew = true;
  // Run the loop thread under SCHED_FIFO (priority 1) while it runs, so the
  // simulated compute is not stretched when the shards and the client keep
  // every core busy: the loop then stands for an accelerator's timeline.
  // Needs CAP_SYS_NICE; without it the loop runs as it is (see
  // InferenceLoopResult::realtime).
  bool realtime = false;
  // Decode steps stop early once the run has taken this long (the result
  // says how many ran).
  absl::Duration max_run_time = absl::InfiniteDuration();
  // Called after every step with (steps done, steps planned); may be empty.
  std::function<void(int, int)> progress;
};

// What a run measured. Decode-step figures exclude the prefill step.
struct InferenceLoopResult {
  int batch = 0;              // sequences per step
  bool realtime = false;      // the loop thread ran under SCHED_FIFO
  int decode_steps = 0;       // decode steps that ran
  int64_t all_tokens = 0;     // tokens of the run, prefill included
  double run_seconds = 0;     // the whole run, prefill included
  double decode_seconds = 0;  // sum of decode step times

  // Time blocked in WaitArrived over decode steps, as a share of decode
  // step time: in total and per client layer.
  double exposed_wait_seconds = 0;
  double exposed_wait_pct = 0;
  std::vector<double> layer_exposed_wait_pct;
  // The same over the prefill chunks (their time: from a chunk's compute
  // starting to its last block, the next chunk's Prefetch included).
  int prefill_chunks = 0;
  double prefill_seconds = 0;
  double prefill_exposed_wait_seconds = 0;
  double prefill_exposed_wait_pct = 0;
  double prefetch_seconds = 0;  // Prefetch (hash + send), decode steps
  double gather_seconds = 0;    // Wait's copy/dequantisation, decode steps
  // How much later than planned the loop woke from its block sleeps, decode
  // steps: the simulated compute stretched by CPU contention (the fetches
  // gain that time; a real accelerator would not give it).
  double late_wake_seconds = 0;

  // Per decode step, milliseconds: step time (Prefetch to the end of the
  // last block), and Prefetch to the arrival of each layer's rows.
  std::vector<double> step_ms;
  std::vector<std::vector<double>> layer_fetch_ms;  // [layer][step]
  // CPU time of this process (all threads: loop and client) over the
  // decode steps, from getrusage, less the loop's own verification and skew
  // counting (which run between steps).
  double decode_cpu_seconds = 0;

  uint64_t decode_ids = 0;          // row ids of decode steps
  uint64_t decode_unique_rows = 0;  // after de-duplication
  uint64_t verified = 0;            // rows checked against the table
  uint64_t wrong = 0;               // of which did not match

  // Share of all lookups hitting the 1% / 10% most frequent of the rows the
  // run touched (percent), and those rows' share of the table's rows. Both 0
  // unless measure_skew. Relative to the rows touched, so a short run on a
  // large table does not read 100%.
  double top1_share_pct = 0;
  double top10_share_pct = 0;
  double touched_rows_pct = 0;

  ClientStats client;  // the client's counters after the run

  double decode_tokens_per_second() const;
};

// Tokens per sequence in each prefill chunk (the last may hold fewer), and
// how many chunks the prefill takes (0 without a prefill).
int PrefillChunkTokens(const InferenceLoopOptions& options);
int PrefillChunks(const InferenceLoopOptions& options);

// p-quantile (0..1) of `samples` (nearest rank); 0 when empty.
double Percentile(std::vector<double> samples, double p);

// Runs the loop. Errors: InvalidArgument for bad options (naming the field),
// or the client's error (prefixed with the step) when a step fails. A wrong
// row is not an error: it is counted in `wrong`.
absl::StatusOr<InferenceLoopResult> RunInferenceLoop(EngramClient& client,
                                                     const InferenceLoopOptions& options);

}  // namespace engram

#endif  // ENGRAM_INFERENCE_INFERENCE_LOOP_H_
