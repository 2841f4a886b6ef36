// Scrubber: re-reads a shard's data at a bounded rate, so damage is found
// (and taken out of service) before a Lookup meets it.
//
// Two walks, each at its own rate, on one background thread, which runs
// under SCHED_IDLE: it gets a core only when no request wants it, so a
// scrub step never delays a Lookup (on a saturated host the walks fall
// behind their rates instead).
//
// The walks:
//   pinned  the hot tier's pinned rows, each checked against the checksum
//           it got when it was loaded (PinnedRowScrub, implemented by the
//           hot tier). A row that fails is never served from RAM again: it
//           is re-read from the store and pinned again when the store's
//           copy still has that checksum, else left to the store.
//   disk    every row of the store in key order (ShardScan,
//           shard/verify.h): RocksDB's block checksums or the cuckoo row
//           checksums are verified, and at the end of each layer its rows'
//           XXH3-64 is compared with shard.json's.
// Each walk starts over when it reaches its end. Failures are counted
// (stats()) and reported one line each (at most kMaxReportsPerPass per walk
// and pass, then a count).
//
// Thread-safe. REQUIRES: the store and the PinnedRowScrub outlive the
// scrubber (the destructor stops and joins its thread).
#ifndef ENGRAM_SHARD_SCRUBBER_H_
#define ENGRAM_SHARD_SCRUBBER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "shard/row_store.h"
#include "shard/verify.h"

namespace engram {

struct ScrubberOptions {
  // Pinned rows checked, bytes per second; 0 = never. 16 MiB/s is ~63,000
  // rows of 264 bytes a second; a pass over a 24 GiB arena takes ~26
  // minutes. Its CPU cost: docs/reliability.md, "The scrubber".
  uint64_t pinned_bytes_per_second = uint64_t{16} << 20;
  // Rows read back from the store, bytes per second; 0 = never. 1 MiB/s is
  // ~4,000 rows of 264 bytes a second, read in key order with readahead
  // (RowStore::ScanRows: ~18 reads of ~80 KB a second with O_DIRECT); a
  // pass over 24 GiB takes ~7 hours.
  uint64_t disk_bytes_per_second = uint64_t{1} << 20;
  // Rows per step of a walk; the thread sleeps between steps to keep the
  // rates. 2048 rows of 264 bytes: ~30 pinned steps a second at the default
  // rate (each step a wake-up, so fewer, larger steps cost less) and a disk
  // step every half second.
  uint32_t batch_rows = 2048;
  // Where failures are reported, one line each; empty = stderr.
  std::function<void(const std::string&)> report;
};

// Cumulative counts, for metrics.
struct ScrubStats {
  uint64_t pinned_rows = 0;       // pinned rows checked
  uint64_t pinned_failures = 0;   // ... that failed their checksum
  uint64_t pinned_repaired = 0;   // ... re-read from the store and pinned again
  uint64_t disk_rows = 0;         // rows read back from the store
  uint64_t disk_failures = 0;     // ... that it could not return (DATA_LOSS)
  uint64_t layer_mismatches = 0;  // layers whose rows' checksum differed from shard.json
  uint64_t pinned_passes = 0;     // complete walks
  uint64_t disk_passes = 0;

  ScrubStats& operator+=(const ScrubStats& o);
};

// The pinned rows of a hot tier, as the scrubber walks them.
class PinnedRowScrub {
 public:
  using Report = std::function<void(const std::string&)>;
  struct Step {
    uint64_t next = 0;   // the position to continue from
    uint64_t bytes = 0;  // row bytes checked
  };
  virtual ~PinnedRowScrub() = default;
  // The walk's positions are [0, scrub_positions()); one may hold no row.
  virtual uint64_t scrub_positions() const = 0;
  // Checks the pinned rows from position `begin` on, until max_rows rows
  // were checked or the walk's end. A row that fails is taken out of
  // service and re-pinned from the store when it can be (see above); rows
  // taken out earlier are retried. Adds to *stats; one `report` line a
  // failure.
  virtual Step ScrubPinned(uint64_t begin, uint64_t max_rows, ScrubStats* stats,
                           const Report& report) = 0;
};

class Scrubber {
 public:
  // At most this many failure lines per walk and pass.
  static constexpr int kMaxReportsPerPass = 10;

  // `pinned` may be null (nothing pinned). Starts the thread when a rate
  // is > 0.
  Scrubber(RowStore& store, PinnedRowScrub* pinned, ScrubberOptions options);
  ~Scrubber();
  Scrubber(const Scrubber&) = delete;
  Scrubber& operator=(const Scrubber&) = delete;

  ScrubStats stats() const;
  // One complete pass of both walks now, on the calling thread, whatever
  // the rates (the background walks pause meanwhile and then go on where
  // they were). What this pass found; it is added to stats() too.
  ScrubStats RunPass();

 private:
  class Reporter;
  class DiskVisitor;
  void Loop();
  // One step of each walk; the bytes it checked.
  uint64_t PinnedStep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t DiskStep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Add(const ScrubStats& s);

  RowStore& store_;
  PinnedRowScrub* const pinned_;
  const ScrubberOptions options_;

  absl::Mutex mu_;  // the walks' state; held for a step
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t pinned_pos_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<Reporter> pinned_reporter_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ShardScan> disk_scan_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Reporter> disk_reporter_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<DiskVisitor> disk_visitor_ ABSL_GUARDED_BY(mu_);

  mutable absl::Mutex stats_mu_;
  ScrubStats stats_ ABSL_GUARDED_BY(stats_mu_);

  std::thread thread_;
};

}  // namespace engram

#endif  // ENGRAM_SHARD_SCRUBBER_H_
