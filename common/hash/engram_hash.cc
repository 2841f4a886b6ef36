#include "common/hash/engram_hash.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"

namespace engram {
namespace {

// floor_mod(x, d) for d > 0 from an unsigned remainder: for negative x,
// floor_mod(x, d) = d - 1 - (~x mod d), and ~x = -x - 1 >= 0.
template <bool kFast>
inline uint64_t FloorMod(int64_t x, const FastModulo& m) {
  const uint64_t d = m.divisor();
  const uint64_t neg = static_cast<uint64_t>(x >> 63);  // all ones if x < 0
  const uint64_t u = static_cast<uint64_t>(x) ^ neg;
  const uint64_t r = kFast ? m.Mod(u) : u % d;
  return (r ^ neg) + (d & neg);
}

}  // namespace

NgramHasher::NgramHasher(HashLayout layout, HasherOptions options)
    : layout_(std::move(layout)),
      options_(options),
      n_layers_(layout_.n_layers()),
      n_orders_(layout_.n_orders()),
      n_heads_(layout_.n_heads),
      n_cols_(layout_.n_cols()) {
  const int N = layout_.max_ngram_size;
  multipliers_.reserve(static_cast<size_t>(n_layers_) * N);
  columns_.reserve(static_cast<size_t>(n_layers_) * n_cols_);
  for (int l = 0; l < n_layers_; ++l) {
    for (int s = 0; s < N; ++s) {
      multipliers_.push_back(static_cast<uint64_t>(layout_.multipliers[l][s]));
    }
    for (int c = 0; c < n_cols_; ++c) {
      const uint64_t p = static_cast<uint64_t>(layout_.prime(l, c));
      columns_.push_back({FastModulo(p), static_cast<uint64_t>(layout_.offsets[l][c])});
    }
  }
}

absl::StatusOr<std::unique_ptr<NgramHasher>> NgramHasher::Create(HashLayout layout,
                                                                 HasherOptions options) {
  RETURN_IF_ERROR(layout.Validate());
  return std::unique_ptr<NgramHasher>(new NgramHasher(std::move(layout), options));
}

absl::Status NgramHasher::Check(const SequenceState& seq, int64_t start_pos,
                                std::span<const int64_t> input_ids,
                                std::span<const uint8_t> mask) const {
  const int64_t T = static_cast<int64_t>(input_ids.size());
  if (start_pos < 0) {
    return absl::InvalidArgumentError(absl::StrCat("start_pos ", start_pos, " is negative"));
  }
  if (start_pos > seq.length()) {
    return absl::InvalidArgumentError(
        absl::StrCat("start_pos ", start_pos, " is past the ", seq.length(),
                     " positions this sequence holds; hash every position in order "
                     "(start_pos 0 starts a new generation)"));
  }
  if (start_pos + T > seq.capacity()) {
    return absl::OutOfRangeError(absl::StrCat("positions up to ", start_pos + T,
                                              " exceed the sequence capacity of ", seq.capacity(),
                                              "; raise the capacity or start a new generation"));
  }
  if (!mask.empty() && mask.size() != input_ids.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("mask has ", mask.size(), " entries for ", T, " ids"));
  }
  for (int64_t t = 0; t < T; ++t) {
    const int64_t id = input_ids[t];
    if (id < 0 || id >= layout_.vocab_size) {
      // Masked positions never read the token map, but an id out of range is
      // still a caller bug worth reporting.
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " at position ", start_pos + t,
                       " is outside the vocabulary [0, ", layout_.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

void NgramHasher::HashChecked(SequenceState& seq, int64_t start_pos,
                              std::span<const int64_t> input_ids, std::span<const uint8_t> mask,
                              RowId* out) const {
  const int64_t T = static_cast<int64_t>(input_ids.size());
  const int64_t end = start_pos + T;
  if (static_cast<int64_t>(seq.cache_.size()) < end) {
    size_t grown = std::max<size_t>(seq.cache_.size() * 2, 256);
    grown = std::min<size_t>(std::max<size_t>(grown, end), seq.capacity_);
    seq.cache_.resize(grown);
  }
  int64_t* cache = seq.cache_.data();
  const int64_t* map = layout_.token_map.data();
  for (int64_t t = 0; t < T; ++t) {
    const bool text = mask.empty() || mask[t] != 0;
    cache[start_pos + t] = text ? map[input_ids[t]] : layout_.dead_id;
  }
  seq.length_ = end;
  if (options_.modulo == HasherOptions::Modulo::kFast) {
    HashPositions<true>(cache, start_pos, end, out);
  } else {
    HashPositions<false>(cache, start_pos, end, out);
  }
}

template <bool kFast>
void NgramHasher::HashPositions(const int64_t* cache, int64_t start_pos, int64_t end_pos,
                                RowId* out) const {
  constexpr int kMaxN = 64;
  const int N = layout_.max_ngram_size;
  const int64_t pad = layout_.pad_id;
  const int64_t dead = layout_.dead_id;
  uint64_t tok[kMaxN];
  for (int64_t p = start_pos; p < end_pos; ++p) {
    bool padded = false;
    for (int s = 0; s < N; ++s) {
      if (!padded) {
        if (p < s || cache[p - s] == dead) {
          padded = true;
        } else {
          tok[s] = static_cast<uint64_t>(cache[p - s]);
          continue;
        }
      }
      tok[s] = static_cast<uint64_t>(pad);
    }
    for (int l = 0; l < n_layers_; ++l) {
      const uint64_t* mult = &multipliers_[static_cast<size_t>(l) * N];
      const Column* col = &columns_[static_cast<size_t>(l) * n_cols_];
      // Unsigned multiply and XOR are two's-complement wrap-around in int64.
      uint64_t rolling = tok[0] * mult[0];
      for (int i = 1; i < N; ++i) {
        rolling ^= tok[i] * mult[i];
        const int64_t x = static_cast<int64_t>(rolling);
        for (int h = 0; h < n_heads_; ++h, ++col, ++out) {
          *out = FloorMod<kFast>(x, col->modulo) + col->offset;
        }
      }
    }
  }
}

absl::Status NgramHasher::Hash(SequenceState& seq, int64_t start_pos,
                               std::span<const int64_t> input_ids, std::span<const uint8_t> mask,
                               RowId* out) const {
  RETURN_IF_ERROR(Check(seq, start_pos, input_ids, mask));
  HashChecked(seq, start_pos, input_ids, mask, out);
  return absl::OkStatus();
}

absl::Status NgramHasher::HashBatch(std::span<SequenceState* const> seqs, int64_t start_pos,
                                    int64_t T, const int64_t* input_ids, const uint8_t* mask,
                                    RowId* out) const {
  if (T < 0) return absl::InvalidArgumentError("T is negative");
  const size_t t = static_cast<size_t>(T);
  for (size_t b = 0; b < seqs.size(); ++b) {
    if (seqs[b] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", b, " of the batch is null"));
    }
    std::span<const uint8_t> m;
    if (mask != nullptr) m = {mask + b * t, t};
    if (absl::Status s = Check(*seqs[b], start_pos, {input_ids + b * t, t}, m); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("batch row ", b, ": ", s.message()));
    }
  }
  const size_t per_seq = t * static_cast<size_t>(ids_per_position());
  for (size_t b = 0; b < seqs.size(); ++b) {
    std::span<const uint8_t> m;
    if (mask != nullptr) m = {mask + b * t, t};
    HashChecked(*seqs[b], start_pos, {input_ids + b * t, t}, m, out + b * per_seq);
  }
  return absl::OkStatus();
}

}  // namespace engram
