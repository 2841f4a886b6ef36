// EngramClient::LookupInto (client/engram_client.h): rows by id, for a
// worker that hashes itself, fetched as a step of a StepEngine.
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/engram_client.h"
#include "client/engram_client_impl.h"
#include "client/step_engine.h"

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
  std::unique_ptr<StepEngine> engine = c.steps->Take();
  engine->SendLookup(layer, ids);
  Step step(std::move(engine));
  return step.Wait(layer, format, out);
}

}  // namespace engram
