#include "bench/engram_bench/engram_bench_workload.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/format/shard_map.h"
#include "common/util/status_macros.h"

namespace engram::bench {

absl::StatusOr<StepStream> StepStream::Build(const TokenTrace& trace, const NgramHasher& hasher,
                                             const StreamSpec& spec) {
  const bool decode = spec.tokens == 1;
  if (spec.batch < 1 || spec.tokens < 1 || spec.steps < 1 || (decode && spec.prefill < 1) ||
      trace.size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream: batch ", spec.batch, ", tokens ", spec.tokens, ", prefill ",
                     spec.prefill, ", steps ", spec.steps, " (need >= 1 each, and a trace)"));
  }
  StepStream s;
  s.spec_ = spec;
  s.n_layers_ = hasher.n_layers();
  s.n_cols_ = hasher.n_cols();
  const size_t B = static_cast<size_t>(spec.batch);
  const size_t T = static_cast<size_t>(spec.tokens);
  const size_t P = decode ? static_cast<size_t>(spec.prefill) : 0;
  s.ids_per_layer_ = B * T * static_cast<size_t>(s.n_cols_);
  s.n_steps_ =
      std::clamp<size_t>(spec.max_ids / s.ids_per_step(), 1, static_cast<size_t>(spec.steps));
  if (decode && static_cast<int64_t>(P + s.n_steps_) > SequenceState::kDefaultCapacity) {
    return absl::InvalidArgumentError("stream: prefill + steps exceed a sequence's capacity");
  }

  // Tokens: sequence b's position p is trace.Token(b, B, p); a prefill
  // chunk s covers positions [s * T, (s + 1) * T).
  const int batch = spec.batch;
  s.prefill_tokens_.resize(B * P);
  for (size_t b = 0; b < B; ++b) {
    for (size_t p = 0; p < P; ++p) {
      s.prefill_tokens_[b * P + p] = trace.Token(static_cast<int>(b), batch, p);
    }
  }
  s.tokens_.resize(s.n_steps_ * B * T);
  for (size_t step = 0; step < s.n_steps_; ++step) {
    for (size_t b = 0; b < B; ++b) {
      for (size_t t = 0; t < T; ++t) {
        const size_t position = decode ? P + step : step * T + t;
        s.tokens_[(step * B + b) * T + t] = trace.Token(static_cast<int>(b), batch, position);
      }
    }
  }

  // Row ids, hashed as the client library hashes them.
  std::vector<SequenceState> states(B);
  std::vector<SequenceState*> seqs;
  for (SequenceState& st : states) seqs.push_back(&st);
  s.ids_.resize(s.n_steps_ * s.ids_per_step());
  if (decode) {
    std::vector<RowId> scratch(B * P * static_cast<size_t>(hasher.ids_per_position()));
    RETURN_IF_ERROR(hasher.HashBatch(seqs, 0, static_cast<int64_t>(P), s.prefill_tokens_.data(),
                                     nullptr, scratch.data()));
  }
  for (size_t step = 0; step < s.n_steps_; ++step) {
    if (!decode) {
      for (SequenceState& st : states) st.Reset();
    }
    RETURN_IF_ERROR(hasher.HashBatch(seqs, s.start_position(step), static_cast<int64_t>(T),
                                     s.tokens_.data() + step * B * T, nullptr,
                                     s.ids_.data() + step * s.ids_per_step()));
  }

  // Each layer's distinct rows per step and every id's slot among them.
  const size_t L = static_cast<size_t>(s.n_layers_);
  const size_t C = static_cast<size_t>(s.n_cols_);
  s.slots_.resize(s.n_steps_ * s.ids_per_step());
  s.unique_begin_.reserve(s.n_steps_ * L + 1);
  absl::flat_hash_map<uint64_t, uint32_t> seen;
  seen.reserve(s.ids_per_layer_);
  for (size_t step = 0; step < s.n_steps_; ++step) {
    const RowId* ids = s.ids_.data() + step * s.ids_per_step();
    for (size_t l = 0; l < L; ++l) {
      s.unique_begin_.push_back(s.unique_.size());
      seen.clear();
      uint32_t* slot = s.slots_.data() + (step * L + l) * s.ids_per_layer_;
      for (size_t bt = 0; bt < B * T; ++bt) {
        for (size_t c = 0; c < C; ++c) {
          const uint64_t row = ids[(bt * L + l) * C + c];
          const uint32_t next = static_cast<uint32_t>(s.unique_.size() - s.unique_begin_.back());
          auto [it, inserted] = seen.try_emplace(row, next);
          if (inserted) s.unique_.push_back(row);
          *slot++ = it->second;
        }
      }
    }
  }
  s.unique_begin_.push_back(s.unique_.size());
  s.mean_unique_rows_ = static_cast<double>(s.unique_.size()) / static_cast<double>(s.n_steps_);
  return s;
}

std::string StepStream::name() const {
  return decode()           ? absl::StrCat("decode B=", spec_.batch)
         : spec_.batch == 1 ? absl::StrCat("prefill T=", spec_.tokens)
                            : absl::StrCat("prefill B=", spec_.batch, " T=", spec_.tokens);
}

int64_t StepStream::start_position(size_t step) const {
  return decode() ? spec_.prefill + static_cast<int64_t>(step) : 0;
}

std::span<const int64_t> StepStream::tokens(size_t step) const {
  const size_t n = static_cast<size_t>(spec_.batch) * static_cast<size_t>(spec_.tokens);
  return {tokens_.data() + step * n, n};
}

std::span<const RowId> StepStream::ids(size_t step) const {
  return {ids_.data() + step * ids_per_step(), ids_per_step()};
}

std::span<const uint64_t> StepStream::unique(size_t step, int layer) const {
  const size_t k = step * static_cast<size_t>(n_layers_) + static_cast<size_t>(layer);
  return {unique_.data() + unique_begin_[k], unique_begin_[k + 1] - unique_begin_[k]};
}

std::span<const uint32_t> StepStream::slots(size_t step, int layer) const {
  const size_t k = step * static_cast<size_t>(n_layers_) + static_cast<size_t>(layer);
  return {slots_.data() + k * ids_per_layer_, ids_per_layer_};
}

size_t StepStream::unique_rows(size_t step) const {
  const size_t k = step * static_cast<size_t>(n_layers_);
  return unique_begin_[k + n_layers_] - unique_begin_[k];
}

StreamShape MeasureShape(const StepStream& stream, uint64_t table_rows) {
  struct Seen {
    uint64_t count = 0;
    uint64_t last = 0;
  };
  absl::flat_hash_map<uint64_t, Seen> rows;
  std::vector<uint64_t> distances;
  const int L = stream.n_layers();
  const int C = stream.n_cols();
  uint64_t lookup = 0;
  for (size_t step = 0; step < stream.n_steps(); ++step) {
    std::span<const RowId> ids = stream.ids(step);
    for (size_t i = 0; i < ids.size(); ++i, ++lookup) {
      const int layer = static_cast<int>(i / static_cast<size_t>(C)) % L;
      Seen& s = rows[ShardKey(static_cast<uint32_t>(layer), ids[i])];
      if (s.count > 0) distances.push_back(lookup - s.last - 1);
      ++s.count;
      s.last = lookup;
    }
  }
  StreamShape shape;
  shape.ids_per_step = static_cast<double>(stream.ids_per_step());
  shape.unique_per_step = stream.mean_unique_rows();
  std::vector<uint64_t> counts;
  counts.reserve(rows.size());
  for (const auto& [key, s] : rows) counts.push_back(s.count);
  std::sort(counts.begin(), counts.end(), std::greater<>());
  auto top_share = [&](uint64_t k) {
    uint64_t sum = 0;
    for (size_t i = 0; i < counts.size() && i < k; ++i) sum += counts[i];
    return lookup > 0 ? static_cast<double>(sum) / static_cast<double>(lookup) : 0;
  };
  shape.top1_share = top_share(std::max<uint64_t>(1, table_rows / 100));
  shape.top10_share = top_share(std::max<uint64_t>(1, table_rows / 10));
  if (!distances.empty()) {
    auto mid = distances.begin() + static_cast<std::ptrdiff_t>(distances.size() / 2);
    std::nth_element(distances.begin(), mid, distances.end());
    shape.reuse_median = static_cast<double>(*mid);
  }
  return shape;
}

void ScatterRows(const StepStream& stream, size_t step, std::span<const uint8_t* const> unique_rows,
                 uint32_t row_bytes, uint8_t* out) {
  for (int l = 0; l < stream.n_layers(); ++l) {
    const uint8_t* src = unique_rows[static_cast<size_t>(l)];
    for (uint32_t slot : stream.slots(step, l)) {
      std::memcpy(out, src + static_cast<size_t>(slot) * row_bytes, row_bytes);
      out += row_bytes;
    }
  }
}

absl::Status CheckRows(const StepStream& stream, size_t step, const RowArray& table,
                       std::span<const uint8_t> rows) {
  const size_t rb = table.row_bytes();
  if (rows.size() != stream.ids_per_step() * rb) {
    return absl::InternalError(
        absl::StrCat("got ", rows.size(), " row bytes, expected ", stream.ids_per_step() * rb));
  }
  const size_t L = static_cast<size_t>(stream.n_layers());
  const size_t C = static_cast<size_t>(stream.n_cols());
  const size_t positions = stream.ids_per_layer() / C;
  std::span<const RowId> ids = stream.ids(step);
  const uint8_t* got = rows.data();
  for (size_t l = 0; l < L; ++l) {
    for (size_t p = 0; p < positions; ++p) {
      for (size_t c = 0; c < C; ++c, got += rb) {
        const uint64_t row = ids[(p * L + l) * C + c];
        if (std::memcmp(got, table.row(static_cast<uint32_t>(l), row), rb) != 0) {
          return absl::InternalError(absl::StrCat(stream.name(), " step ", step, ": layer ", l,
                                                  " row ", row, " has the wrong bytes"));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace engram::bench
