// EngramClient::LookupInto (rows by id, for a worker that hashes itself) and
// Step::Arrived (client/engram_client.h).
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/engram_client.h"
#include "client/engram_client_impl.h"
#include "client/step_state.h"

namespace engram {

absl::Status EngramClient::LookupInto(int layer, std::span<const RowId> ids, RowFormat format,
                                      std::span<uint8_t> out) {
  Impl& c = *impl_;
  if (layer < 0 || layer >= c.n_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("no Engram layer ", layer, " (the table has ", c.n_layers, ")"));
  }
  const size_t orb = OutputRowBytes(layer, format);
  if (out.size() != ids.size() * orb) {
    return absl::InvalidArgumentError(absl::StrCat("output buffer has ", out.size(), " bytes; ",
                                                   ids.size(), " rows of layer ", layer, " need ",
                                                   ids.size() * orb));
  }
  const uint64_t rows = c.manifest.layers[layer].rows;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "id ", i, " is row ", ids[i], ", outside layer ", layer, "'s table of ", rows, " rows"));
    }
  }
  if (ids.empty()) return absl::OkStatus();

  // One step whose only non-empty layer is `layer`, its ids given instead
  // of hashed; the other layers are sent empty (no RPC) and never waited.
  std::unique_ptr<StepState> st = c.TakeState();
  st->batch = 0;
  st->tokens = 0;
  st->ids.clear();
  for (int l = 0; l < c.n_layers; ++l) {
    StepState::Layer& ly = st->layers[l];
    ly.pending = 0;
    ly.sent = false;
    ly.status = absl::OkStatus();
    ly.resolved = false;
    if (l == layer) {
      ly.layer_ids.assign(ids.begin(), ids.end());
      c.DedupIds(ly);
    } else {  // left as they are, so the pooled state keeps its index size
      ly.unique_rows.clear();
      ly.id_unique.clear();
    }
  }
  st->unique_rows = st->layers[layer].unique_rows.size();
  st->ResetProgress(/*next=*/c.n_layers, /*ready=*/c.n_layers);  // sent right here
  st->number = c.steps.load(std::memory_order_relaxed);
  st->prefetched = absl::Now();
  for (int l = 0; l < c.n_layers; ++l) st->layers[l].arrived = st->prefetched;
  c.SendLayers(*st, 0, c.n_layers - 1);
  c.ids.fetch_add(ids.size(), std::memory_order_relaxed);
  c.unique_rows.fetch_add(st->unique_rows, std::memory_order_relaxed);
  Step step(impl_.get(), std::move(st));
  return step.Wait(layer, format, out);
}

absl::StatusOr<bool> Step::Arrived(int layer) {
  if (state_ == nullptr) return absl::FailedPreconditionError("step was moved from");
  if (layer < 0 || layer >= client_->n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("no Engram layer ", layer));
  }
  StepState& st = *state_;
  absl::MutexLock l(&st.mu);
  const StepState::Layer& ly = st.layers[layer];
  if (ly.sent && ly.pending == 0) return true;
  return absl::Now() >= st.prefetched + client_->options.step_deadline;
}

}  // namespace engram
