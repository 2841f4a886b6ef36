// Step: a prefetched step's handle (client/engram_client.h). It checks the
// caller's arguments and hands everything else to its StepEngine
// (client/step_engine.h), which it gives back to the pool when released.
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/engram_client.h"
#include "client/step_engine.h"
#include "common/util/status_macros.h"

namespace engram {

Step::Step(std::unique_ptr<StepEngine> engine) : engine_(std::move(engine)) {}
Step::Step(Step&& o) noexcept = default;
Step& Step::operator=(Step&& o) noexcept {
  if (this != &o) {
    Release();
    engine_ = std::move(o.engine_);
  }
  return *this;
}

Step::~Step() { Release(); }

void Step::Release() {
  if (engine_ == nullptr) return;
  StepPool* pool = engine_->pool();
  pool->Return(std::move(engine_));
}

int64_t Step::batch() const { return engine_->batch(); }
int64_t Step::tokens_per_sequence() const { return engine_->tokens(); }
uint64_t Step::unique_rows() const { return engine_->unique_rows(); }
std::span<const RowId> Step::row_ids() const { return engine_->ids(); }

absl::Status Step::WaitArrived(int layer) {
  if (engine_ == nullptr) return absl::FailedPreconditionError("step was moved from");
  if (layer < 0 || layer >= engine_->pool()->config().n_layers()) {
    return absl::InvalidArgumentError(absl::StrCat("no Engram layer ", layer));
  }
  return engine_->WaitLayer(layer);
}

absl::StatusOr<bool> Step::Arrived(int layer) {
  if (engine_ == nullptr) return absl::FailedPreconditionError("step was moved from");
  if (layer < 0 || layer >= engine_->pool()->config().n_layers()) {
    return absl::InvalidArgumentError(absl::StrCat("no Engram layer ", layer));
  }
  return engine_->Arrived(layer);
}

absl::Duration Step::FetchLatency(int layer) {
  if (!WaitArrived(layer).ok()) return absl::InfiniteDuration();
  return engine_->ArrivalTime(layer);
}

absl::Status Step::Wait(int layer, RowFormat format, std::span<uint8_t> out) {
  RETURN_IF_ERROR(WaitArrived(layer));
  return engine_->CopyOut(layer, format, out);
}

}  // namespace engram
