// Step: a prefetched step's handle (client/engram_client.h): waiting for a
// layer, writing its rows out, and giving the step's state back.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/engram_client.h"
#include "client/engram_client_impl.h"
#include "client/step_state.h"
#include "common/codec/row_encoding.h"
#include "common/format/table.h"
#include "common/util/status_macros.h"

namespace engram {

Step::Step(EngramClient::Impl* client, std::unique_ptr<StepState> state)
    : client_(client), state_(std::move(state)) {}
Step::Step(Step&& o) noexcept = default;
Step& Step::operator=(Step&& o) noexcept {
  if (this != &o) {
    Release();
    client_ = o.client_;
    state_ = std::move(o.state_);
  }
  return *this;
}

Step::~Step() { Release(); }

void Step::Release() {
  if (state_ == nullptr) return;
  StepState& st = *state_;
  std::vector<ShardRpc*> live;
  {
    absl::MutexLock l(&st.mu);
    st.releasing = true;  // no layer is sent from here on
    if (st.not_quiet > 0) {
      for (auto& rpc : st.rpcs) live.push_back(rpc.get());
    }
  }
  if (!live.empty()) {
    for (ShardRpc* rpc : live) rpc->Cancel();
    absl::MutexLock l(&st.mu);
    while (st.not_quiet > 0) st.cv.Wait(&st.mu);
  }
  {
    absl::MutexLock l(&client_->stats_mu);
    for (auto& rpc : st.rpcs) {
      if (rpc->latency() > absl::ZeroDuration()) {
        client_->shard_latency_sum[rpc->shard()] += absl::ToDoubleSeconds(rpc->latency());
        ++client_->shard_rpcs[rpc->shard()];
      }
    }
  }
  client_->ReturnState(std::move(state_));
}

int64_t Step::batch() const { return state_->batch; }
int64_t Step::tokens_per_sequence() const { return state_->tokens; }
uint64_t Step::unique_rows() const { return state_->unique_rows; }
std::span<const RowId> Step::row_ids() const { return state_->ids; }

absl::Status Step::WaitArrived(int layer) {
  if (state_ == nullptr) return absl::FailedPreconditionError("step was moved from");
  if (layer < 0 || layer >= client_->n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("no Engram layer ", layer));
  }
  StepState& st = *state_;
  client_->Advance(st, layer);  // a layer nobody has sent yet goes out now
  const absl::Duration budget = client_->options.step_deadline;
  const absl::Time due = st.prefetched + budget;  // InfiniteFuture for an infinite budget
  absl::MutexLock l(&st.mu);
  // Claimed is not enough: the claiming thread may still be grouping the
  // layer's rows and counting its RPCs.
  while (!(st.layers[layer].sent && st.layers[layer].pending == 0)) {
    if (st.cv.WaitWithDeadline(&st.mu, due) &&
        !(st.layers[layer].sent && st.layers[layer].pending == 0)) {
      return absl::DeadlineExceededError(
          absl::StrCat("Engram layer ", layer, ": no rows from shard(s) ",
                       st.PendingShardsLocked(st.layers[layer].sent ? layer : -1),
                       " within the step deadline of ", absl::FormatDuration(budget),
                       " since Prefetch (ClientOptions::step_deadline)"));
    }
  }
  return st.layers[layer].status;
}

absl::Duration Step::FetchLatency(int layer) {
  if (!WaitArrived(layer).ok()) return absl::InfiniteDuration();
  absl::MutexLock l(&state_->mu);
  return state_->layers[layer].arrived - state_->prefetched;
}

absl::Status Step::Wait(int layer, RowFormat format, std::span<uint8_t> out) {
  RETURN_IF_ERROR(WaitArrived(layer));
  StepState& st = *state_;
  StepState::Layer& ly = st.layers[layer];
  const LayerInfo& info = client_->manifest.layers[layer];
  const size_t n = ly.id_unique.size();
  const size_t orb = FormatRowBytes(info, format);
  if (out.size() != n * orb) {
    return absl::InvalidArgumentError(absl::StrCat("output buffer has ", out.size(),
                                                   " bytes; layer ", layer, " needs ", n,
                                                   " rows of ", orb, " bytes"));
  }
  if (!ly.resolved) client_->Resolve(st, layer);
  uint8_t* o = out.data();
  switch (format) {
    case RowFormat::kRaw:
      for (size_t i = 0; i < n; ++i, o += orb) std::memcpy(o, ly.src[i], orb);
      break;
    case RowFormat::kF32:
      for (size_t i = 0; i < n; ++i, o += orb) {
        DecodeRows(info.encoding, ly.src[i], 1, info.head_dim, info.scale_block,
                   reinterpret_cast<float*>(o));
      }
      break;
    case RowFormat::kBf16:
      for (size_t i = 0; i < n; ++i, o += orb) {
        DecodeRows(info.encoding, ly.src[i], 1, info.head_dim, info.scale_block,
                   reinterpret_cast<uint16_t*>(o));
      }
      break;
  }
  return absl::OkStatus();
}

}  // namespace engram
