// Fuzz target: the safetensors header reader (ParseSafetensorsHeader,
// common/format/safetensors.h) on an input that is a whole rows file. A header it
// accepts must describe tensors in file order that neither overlap nor
// leave the data section, with the byte extent a known dtype needs; and
// BuildSafetensorsHeader of what it read must parse back to the same
// tensors and metadata.
#include <cstdint>
#include <string>

#include "common/format/safetensors.h"
#include "fuzz/fuzz_util.h"

namespace {

bool SameTensors(const engram::SafetensorsHeader& a, const engram::SafetensorsHeader& b) {
  if (a.tensors.size() != b.tensors.size() || a.metadata != b.metadata) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const engram::SafetensorsTensor& x = a.tensors[i];
    const engram::SafetensorsTensor& y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.begin != y.begin ||
        x.end != y.end) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engram;
  const std::string_view file = fuzz::AsText(data, size);
  const absl::StatusOr<SafetensorsHeader> h = ParseSafetensorsHeader(file, size, "fuzz");
  if (!h.ok()) {
    FUZZ_CHECK(h.status().code() == absl::StatusCode::kInvalidArgument ||
                   h.status().code() == absl::StatusCode::kDataLoss,
               h.status().ToString());
    return 0;
  }
  FUZZ_CHECK(h->data_start >= 8 && h->data_start <= size && h->file_size == size, "data_start");
  const uint64_t data_size = size - h->data_start;
  for (size_t i = 0; i < h->tensors.size(); ++i) {
    const SafetensorsTensor& t = h->tensors[i];
    FUZZ_CHECK(t.begin <= t.end && t.end <= data_size, absl::StrCat(t.name, " extent"));
    FUZZ_CHECK(i == 0 || h->tensors[i - 1].end <= t.begin, absl::StrCat(t.name, " overlaps"));
    FUZZ_CHECK(h->Find(t.name) == &t, absl::StrCat(t.name, " not found by name"));
    if (const int bits = SafetensorsDtypeBits(t.dtype); bits > 0) {
      FUZZ_CHECK((t.num_elements() * bits + 7) / 8 == t.num_bytes(), absl::StrCat(t.name, " size"));
    }
  }
  std::string rebuilt = BuildSafetensorsHeader(h->tensors, h->metadata);
  const uint64_t rebuilt_start = rebuilt.size();
  rebuilt.append(data_size, '\0');
  const absl::StatusOr<SafetensorsHeader> again =
      ParseSafetensorsHeader(rebuilt, rebuilt.size(), "rebuilt");
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(again->data_start == rebuilt_start && SameTensors(*h, *again), "rebuilt header");
  return 0;
}
