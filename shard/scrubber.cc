#include "shard/scrubber.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/util/log.h"

namespace engram {

ScrubStats& ScrubStats::operator+=(const ScrubStats& o) {
  pinned_rows += o.pinned_rows;
  pinned_failures += o.pinned_failures;
  pinned_repaired += o.pinned_repaired;
  disk_rows += o.disk_rows;
  disk_failures += o.disk_failures;
  layer_mismatches += o.layer_mismatches;
  pinned_passes += o.pinned_passes;
  disk_passes += o.disk_passes;
  return *this;
}

// One walk's failure lines: passed on up to kMaxReportsPerPass a pass, then
// counted, and the count reported when the pass ends.
class Scrubber::Reporter {
 public:
  Reporter(const std::function<void(const std::string&)>& sink, std::string walk)
      : sink_(sink), walk_(std::move(walk)) {}

  void operator()(const std::string& line) {
    if (reported_ < kMaxReportsPerPass) {
      ++reported_;
      Emit(line);
    } else {
      ++suppressed_;
    }
  }
  PinnedRowScrub::Report AsReport() {
    return [this](const std::string& line) { (*this)(line); };
  }
  void EndPass() {
    if (suppressed_ > 0) {
      Emit(absl::StrCat("scrub: ", suppressed_, " more failures of this pass of the ", walk_,
                        " walk were not reported one by one"));
    }
    reported_ = 0;
    suppressed_ = 0;
  }

 private:
  void Emit(const std::string& line) {
    if (sink_) {
      sink_(line);
    } else {
      LogLine('E', line);
    }
  }

  const std::function<void(const std::string&)>& sink_;
  const std::string walk_;
  int reported_ = 0;
  uint64_t suppressed_ = 0;
};

// Counts what a ShardScan meets into the current step's stats.
class Scrubber::DiskVisitor final : public ShardScan::Visitor {
 public:
  DiskVisitor(const RowStore& store, Reporter& reporter) : store_(store), reporter_(reporter) {}

  void Bind(ScrubStats* stats, uint64_t* bytes) {
    stats_ = stats;
    bytes_ = bytes;
  }
  void Row(uint32_t layer, uint64_t row, const uint8_t* bytes) override {
    ++stats_->disk_rows;
    *bytes_ += store_.shard_map().row_bytes[layer];
  }
  void Damaged(uint32_t layer, uint64_t row, const absl::Status& why) override {
    ++stats_->disk_rows;
    ++stats_->disk_failures;
    *bytes_ += store_.shard_map().row_bytes[layer];
    reporter_(absl::StrCat("scrub: ", why.ToString()));
  }
  void LayerDone(const LayerCheck& check) override {
    if (check.damaged != 0 || check.matches()) return;  // damaged rows: reported one by one
    ++stats_->layer_mismatches;
    reporter_(absl::StrCat("scrub: shard ", store_.shard_index(), " (", store_.shard_dir(),
                           "): the rows of layer ", check.layer, " hash to ", check.checksum,
                           ", shard.json says ", check.expected,
                           "; run engramctl verify on the directory"));
  }

 private:
  const RowStore& store_;
  Reporter& reporter_;
  ScrubStats* stats_ = nullptr;
  uint64_t* bytes_ = nullptr;
};

Scrubber::Scrubber(RowStore& store, PinnedRowScrub* pinned, ScrubberOptions options)
    : store_(store), pinned_(pinned), options_(std::move(options)) {
  const bool any = (pinned_ != nullptr && options_.pinned_bytes_per_second > 0 &&
                    pinned_->scrub_positions() > 0) ||
                   options_.disk_bytes_per_second > 0;
  if (any) thread_ = std::thread([this] { Loop(); });
}

Scrubber::~Scrubber() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

ScrubStats Scrubber::stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

void Scrubber::Add(const ScrubStats& s) {
  absl::MutexLock lock(&stats_mu_);
  stats_ += s;
}

uint64_t Scrubber::PinnedStep() {
  if (pinned_reporter_ == nullptr) {
    pinned_reporter_ = std::make_unique<Reporter>(options_.report, "pinned");
  }
  ScrubStats s;
  const PinnedRowScrub::Step step =
      pinned_->ScrubPinned(pinned_pos_, options_.batch_rows, &s, pinned_reporter_->AsReport());
  pinned_pos_ = step.next;
  if (pinned_pos_ >= pinned_->scrub_positions()) {
    ++s.pinned_passes;
    pinned_pos_ = 0;
    pinned_reporter_->EndPass();
  }
  Add(s);
  return step.bytes;
}

uint64_t Scrubber::DiskStep() {
  if (disk_scan_ == nullptr) {
    disk_scan_ = std::make_unique<ShardScan>(store_, options_.batch_rows);
    disk_reporter_ = std::make_unique<Reporter>(options_.report, "disk");
    disk_visitor_ = std::make_unique<DiskVisitor>(store_, *disk_reporter_);
  }
  ScrubStats s;
  uint64_t bytes = 0;
  disk_visitor_->Bind(&s, &bytes);
  disk_scan_->Step(options_.batch_rows, *disk_visitor_);
  if (disk_scan_->done()) {
    ++s.disk_passes;
    disk_scan_->Restart();
    disk_reporter_->EndPass();
  }
  Add(s);
  return bytes;
}

void Scrubber::Loop() {
  // Background work: a core only when nothing else wants it (no privilege
  // needed to lower one's own policy; if refused, the walks run as before).
  sched_param idle{};
  (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
  const bool pinned =
      pinned_ != nullptr && options_.pinned_bytes_per_second > 0 && pinned_->scrub_positions() > 0;
  const bool disk = options_.disk_bytes_per_second > 0;
  // The time a step's bytes are worth at `rate` (at least a page's, so an
  // empty walk does not spin).
  auto pace = [](uint64_t bytes, uint64_t rate) {
    return absl::Seconds(static_cast<double>(std::max<uint64_t>(bytes, 4096)) /
                         static_cast<double>(rate));
  };
  absl::MutexLock lock(&mu_);
  absl::Time next_pinned = absl::Now(), next_disk = next_pinned;
  while (!stopping_) {
    const absl::Time now = absl::Now();
    if (pinned && now >= next_pinned) {
      next_pinned =
          std::max(next_pinned + pace(PinnedStep(), options_.pinned_bytes_per_second), now);
    }
    if (disk && now >= next_disk) {
      next_disk = std::max(next_disk + pace(DiskStep(), options_.disk_bytes_per_second), now);
    }
    absl::Time wake = absl::InfiniteFuture();
    if (pinned) wake = std::min(wake, next_pinned);
    if (disk) wake = std::min(wake, next_disk);
    mu_.AwaitWithDeadline(absl::Condition(&stopping_), wake);
  }
}

ScrubStats Scrubber::RunPass() {
  absl::MutexLock lock(&mu_);
  ScrubStats s;
  if (pinned_ != nullptr && pinned_->scrub_positions() > 0) {
    Reporter reporter(options_.report, "pinned");
    for (uint64_t pos = 0; pos < pinned_->scrub_positions();) {
      pos = pinned_->ScrubPinned(pos, options_.batch_rows, &s, reporter.AsReport()).next;
    }
    ++s.pinned_passes;
    reporter.EndPass();
  }
  Reporter reporter(options_.report, "disk");
  DiskVisitor visitor(store_, reporter);
  uint64_t bytes = 0;
  visitor.Bind(&s, &bytes);
  ShardScan scan(store_, options_.batch_rows);
  while (scan.Step(options_.batch_rows, visitor) > 0) {
  }
  ++s.disk_passes;
  reporter.EndPass();
  Add(s);
  return s;
}

}  // namespace engram
