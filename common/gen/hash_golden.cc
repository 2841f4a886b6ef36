#include "common/gen/hash_golden.h"

#include <fstream>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/hash/engram_hash.h"
#include "common/hash/layout_json.h"
#include "common/util/status_macros.h"

namespace engram {
namespace {

using nlohmann::json;

absl::Status Malformed(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// Checks that `j` is a [B][T] array of arrays with equal row lengths.
bool IsMatrix(const json& j, size_t rows, size_t cols) {
  if (!j.is_array() || j.size() != rows) return false;
  for (const json& r : j) {
    if (!r.is_array() || r.size() != cols) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<HashGoldenResult> CheckHashGoldenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  const json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Malformed(path, "not a JSON object");
  }
  HashGoldenResult result;
  if (!doc.contains("layout") && !doc.contains("calls")) {
    result.not_hash_golden = true;
    return result;
  }
  if (!doc.contains("layout") || !doc.contains("calls") || !doc["calls"].is_array()) {
    return Malformed(path, "expected members \"layout\" and \"calls\" (an array)");
  }
  absl::StatusOr<HashLayout> layout = LayoutFromJsonValue(doc["layout"]);
  if (!layout.ok()) return Malformed(path, std::string(layout.status().message()));
  ASSIGN_OR_RETURN(std::unique_ptr<NgramHasher> hasher, NgramHasher::Create(*std::move(layout)));
  const NgramHasher& h = *hasher;
  const size_t per_pos = static_cast<size_t>(h.ids_per_position());

  std::vector<std::unique_ptr<SequenceState>> seqs;
  std::vector<int64_t> ids;
  std::vector<uint8_t> mask;
  std::vector<RowId> out;
  std::vector<SequenceState*> batch;
  size_t call_index = 0;
  for (const json& call : doc["calls"]) {
    const std::string where = absl::StrCat("call ", call_index++);
    if (!call.is_object() || !call.contains("input_ids") || !call.contains("expected") ||
        !call.contains("start_pos") || !call["input_ids"].is_array() || call["input_ids"].empty() ||
        !call["input_ids"][0].is_array() || !call["start_pos"].is_number_integer()) {
      return Malformed(path, where + ": needs start_pos, input_ids [B][T], expected");
    }
    const json& jids = call["input_ids"];
    const size_t B = jids.size(), T = jids[0].size();
    if (!IsMatrix(jids, B, T)) return Malformed(path, where + ": ragged input_ids");
    const bool has_mask = call.contains("token_mask");
    if (has_mask && !IsMatrix(call["token_mask"], B, T)) {
      return Malformed(path, where + ": token_mask must be [B][T] like input_ids");
    }
    const json& jexp = call["expected"];
    if (!IsMatrix(jexp, B, T)) return Malformed(path, where + ": expected must be [B][T][...]");
    while (seqs.size() < B) seqs.push_back(std::make_unique<SequenceState>());
    ids.assign(B * T, 0);
    mask.assign(B * T, 1);
    for (size_t b = 0; b < B; ++b) {
      for (size_t t = 0; t < T; ++t) {
        const json& v = jids[b][t];
        if (!v.is_number_integer()) return Malformed(path, where + ": non-integer token id");
        ids[b * T + t] = v.get<int64_t>();
        if (has_mask) {
          const json& m = call["token_mask"][b][t];
          if (!m.is_boolean() && !m.is_number_integer()) {
            return Malformed(path, where + ": token_mask must hold booleans");
          }
          mask[b * T + t] = m.is_boolean() ? m.get<bool>() : m.get<int64_t>() != 0;
        }
      }
    }
    batch.clear();
    for (size_t b = 0; b < B; ++b) batch.push_back(seqs[b].get());
    out.assign(B * T * per_pos, 0);
    absl::Status s = h.HashBatch(batch, call["start_pos"].get<int64_t>(), static_cast<int64_t>(T),
                                 ids.data(), mask.data(), out.data());
    if (!s.ok()) return Malformed(path, absl::StrCat(where, ": ", s.message()));
    bool ok = true;
    for (size_t b = 0; b < B && ok; ++b) {
      for (size_t t = 0; t < T && ok; ++t) {
        const json& e = jexp[b][t];
        if (!e.is_array() || e.size() != static_cast<size_t>(h.n_layers())) {
          return Malformed(path, where + ": expected[b][t] must be [n_layers][n_cols]");
        }
        for (int l = 0; l < h.n_layers() && ok; ++l) {
          if (!e[l].is_array() || e[l].size() != static_cast<size_t>(h.n_cols())) {
            return Malformed(path, where + ": expected[b][t][l] must have n_cols ids");
          }
          for (int c = 0; c < h.n_cols(); ++c) {
            const RowId got = out[(b * T + t) * per_pos + l * h.n_cols() + c];
            ++result.ids_checked;
            if (!e[l][c].is_number_integer() ||
                e[l][c].get<int64_t>() != static_cast<int64_t>(got)) {
              ok = false;
              result.first_mismatch =
                  absl::StrCat(where, " b=", b, " t=", t, " layer=", l, " col=", c, ": expected ",
                               e[l][c].dump(), ", got ", got);
              break;
            }
          }
        }
      }
    }
    ok ? ++result.calls_passed : ++result.calls_failed;
  }
  return result;
}

}  // namespace engram
