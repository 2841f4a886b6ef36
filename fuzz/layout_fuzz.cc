// Fuzz target: the hash layout reader (HashLayout::FromJson,
// common/hash/layout.h), what clients, tools and the importer make of a layout
// or a manifest's "layout". A layout it accepts must read back from its
// ToJson unchanged, and a hasher built on it must hash a few tokens into
// row ids inside each layer's table (what Validate promises the hasher).
#include <cstdint>
#include <string>
#include <vector>

#include "common/hash/engram_hash.h"
#include "common/hash/layout.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engram;
  absl::StatusOr<HashLayout> layout = HashLayout::FromJson(fuzz::AsText(data, size));
  if (!layout.ok()) {
    FUZZ_CHECK(layout.status().code() == absl::StatusCode::kInvalidArgument,
               layout.status().ToString());
    return 0;
  }
  const std::string json = layout->ToJson();
  const absl::StatusOr<HashLayout> again = HashLayout::FromJson(json);
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(again->ToJson() == json, "ToJson round trip");

  absl::StatusOr<std::unique_ptr<NgramHasher>> hasher = NgramHasher::Create(*std::move(layout));
  FUZZ_CHECK(hasher.ok(), hasher.status().ToString());
  const HashLayout& l = (*hasher)->layout();
  // The first and last tokens, and a few in between; one masked position.
  std::vector<int64_t> tokens;
  for (int64_t t : {int64_t{0}, l.vocab_size - 1, l.vocab_size / 2, int64_t{1}, l.vocab_size / 3}) {
    tokens.push_back(t < l.vocab_size ? t : 0);
  }
  const std::vector<uint8_t> mask = {1, 1, 0, 1, 1};
  std::vector<RowId> ids(tokens.size() * (*hasher)->ids_per_position());
  SequenceState seq;
  const absl::Status s = (*hasher)->Hash(seq, 0, tokens, mask, ids.data());
  FUZZ_CHECK(s.ok(), s.ToString());
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t layer = (i / (*hasher)->n_cols()) % l.n_layers();
    FUZZ_CHECK(ids[i] < static_cast<uint64_t>(l.table_rows[layer]),
               absl::StrCat("id ", ids[i], " outside layer ", layer));
  }
  return 0;
}
