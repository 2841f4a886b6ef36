// GgufEngramFile::BuildLayout: the deepseek41.engram.* metadata of the three
// GGUF families (see gguf.h) and their Engram tensors.
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"
#include "shard/import/gguf.h"

namespace engram {
namespace {

constexpr char kPrefix[] = "deepseek41.engram.";
constexpr uint64_t kMaxRows = uint64_t{1} << 48;
constexpr uint64_t kMaxHeadDim = 65536;

// An integer metadata entry, under one of its spellings.
struct IntKey {
  const char* name;
  const char* alt;  // the other family's spelling, or nullptr
  bool array;
  bool bits;  // negative values allowed (multipliers are int64 bit patterns)
};

std::string Spelled(const IntKey& k) {
  return k.alt == nullptr ? absl::StrCat(kPrefix, k.name)
                          : absl::StrCat(kPrefix, k.name, " (or ", kPrefix, k.alt, ")");
}

std::string DimsString(const std::vector<uint64_t>& dims) {
  std::string s;
  for (uint64_t d : dims) absl::StrAppend(&s, s.empty() ? "" : ", ", d);
  return absl::StrCat("[", s, "]");
}

}  // namespace

absl::Status GgufEngramFile::BuildLayout() {
  const GgufHeader& h = headers_[0];
  auto bad = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", parts...));
  };
  const GgufValue* arch = h.Find("general.architecture");
  if (arch == nullptr || arch->type != GgufType::kString) {
    return bad("no general.architecture string; not a DeepSeek-V4.1 GGUF");
  }
  if (arch->str != "deepseek41") {
    return bad("architecture is '", arch->str, "', want 'deepseek41' (a DeepSeek-V4.1 GGUF)");
  }
  const std::string prefix = kPrefix;
  const GgufValue* enc = h.Find(prefix + "encoding");
  if (enc != nullptr) {
    if (enc->type != GgufType::kString) {
      return bad("metadata ", prefix, "encoding must be a string");
    }
    if (enc->str != kEncoding) {
      return bad("Engram tables are encoded as '", enc->str, "'; a ", prefix,
                 "encoding key must say '", kEncoding,
                 "' (ds4 fp8 rows); llama.cpp conversions carry none and give each "
                 "table's ggml type instead");
    }
    family_ = "ds4";
  } else {
    family_ = "llama.cpp";
    for (const char* fork : {"n_heads", "head_dim", "pad_token_id", "num_embeddings"}) {
      if (h.Find(prefix + fork) != nullptr) family_ = "fork";
    }
  }
  const bool ds4 = family_ == "ds4";

  // One key's values (64-bit patterns) into *out; empty when absent and not
  // required. Both spellings present must agree.
  auto ints = [&](const IntKey& k, bool required, std::vector<uint64_t>* out) -> absl::Status {
    out->clear();
    bool found = false;
    for (const char* spelling : {k.name, k.alt}) {
      if (spelling == nullptr) continue;
      const std::string key = prefix + spelling;
      const GgufValue* v = h.Find(key);
      if (v == nullptr) continue;
      if (!v->is_integer() || v->is_array() != k.array) {
        return bad("metadata ", key, " must be an integer ", k.array ? "array" : "scalar");
      }
      if (!k.bits && v->is_signed()) {
        for (uint64_t x : v->ints) {
          if (static_cast<int64_t>(x) < 0) {
            return bad("metadata ", key, " holds the negative value ", static_cast<int64_t>(x));
          }
        }
      }
      if (found && *out != v->ints) {
        size_t i = 0;
        while (i < out->size() && i < v->ints.size() && (*out)[i] == v->ints[i]) ++i;
        const bool ended = i == out->size() || i == v->ints.size();
        return bad("metadata ", prefix, k.name, " and ", key, " disagree",
                   !k.array ? absl::StrCat(" (", (*out)[0], " vs ", v->ints[0], ")")
                   : ended
                       ? absl::StrCat(" (", out->size(), " vs ", v->ints.size(), " entries)")
                       : absl::StrCat(" at entry ", i, " (", (*out)[i], " vs ", v->ints[i], ")"),
                   "; they must agree");
      }
      *out = v->ints;
      found = true;
    }
    if (!found && required) {
      return bad("missing metadata ", Spelled(k),
                 k.name == std::string_view("key_length")
                     ? absl::StrCat(", which a file without ", prefix, "encoding (not ds4) needs")
                     : "");
    }
    return absl::OkStatus();
  };
  std::vector<uint64_t> layer_ids, rows, token_map, primes, multipliers, offsets, compressed, pad,
      max_ngram, head_count, head_dim;
  struct Want {
    IntKey key;
    bool required;
    std::vector<uint64_t>* out;
  };
  const Want wants[] = {
      {{"layer_ids", nullptr, true, false}, true, &layer_ids},
      {{"rows", "num_embeddings", true, false}, false, &rows},
      {{"token_map", nullptr, true, false}, true, &token_map},
      {{"primes", nullptr, true, false}, true, &primes},
      {{"multipliers", nullptr, true, true}, true, &multipliers},
      {{"offsets", nullptr, true, false}, false, &offsets},
      {{"compressed_vocab_size", nullptr, false, false}, false, &compressed},
      {{"pad_id", "pad_token_id", false, false}, true, &pad},
      {{"max_ngram_size", nullptr, false, false}, false, &max_ngram},
      {{"head_count", "n_heads", false, false}, false, &head_count},
      {{"key_length", "head_dim", false, false}, !ds4, &head_dim},
  };
  for (const Want& w : wants) {
    RETURN_IF_ERROR(ints(w.key, w.required, w.out));
  }
  const uint64_t L = layer_ids.size();
  if (L == 0) return bad(prefix, "layer_ids is empty");
  if (!rows.empty() && rows.size() != L) {
    return bad(prefix, "rows has ", rows.size(), " entries for ", L, " layers");
  }
  if (token_map.empty()) return bad(prefix, "token_map is empty");
  const uint64_t N = max_ngram.empty() ? multipliers.size() / L : max_ngram[0];
  if (N < 2 || N > 64 || multipliers.size() != L * N) {
    return bad(prefix, "multipliers has ", multipliers.size(), " entries; want max_ngram_size (", N,
               ", at least 2) per layer for ", L, " layers");
  }
  const uint64_t per_head = L * (N - 1);
  const uint64_t H = head_count.empty() ? primes.size() / per_head : head_count[0];
  if (H < 1 || H > 4096 || primes.size() != per_head * H) {
    return bad(prefix, "primes has ", primes.size(), " entries; want ", L, " layers x ", N - 1,
               " orders x head_count (", H, ")");
  }
  const uint64_t cols = (N - 1) * H;
  if (!offsets.empty() && offsets.size() != L * cols) {
    return bad(prefix, "offsets has ", offsets.size(), " entries, want ", L * cols);
  }
  if (!compressed.empty()) {
    for (size_t t = 0; t < token_map.size(); ++t) {
      if (token_map[t] >= compressed[0]) {
        return bad(prefix, "token_map[", t, "] = ", token_map[t],
                   " is not below compressed_vocab_size ", compressed[0]);
      }
    }
  }
  const uint64_t values = ds4 ? static_cast<uint64_t>(kHeadDim) : head_dim[0];
  if (values == 0 || values > kMaxHeadDim || (ds4 && !head_dim.empty() && head_dim[0] != values)) {
    return bad(prefix, "key_length is ", head_dim.empty() ? values : head_dim[0], "; want ",
               ds4 ? absl::StrCat(kHeadDim, " (ds4 rows)") : absl::StrCat("1..", kMaxHeadDim));
  }
  HashLayout& lay = layout_;
  lay.vocab_size = static_cast<int64_t>(token_map.size());
  lay.max_ngram_size = static_cast<int>(N);
  lay.n_heads = static_cast<int>(H);
  lay.pad_id = static_cast<int64_t>(pad[0]);
  lay.token_map.assign(token_map.begin(), token_map.end());
  lay.engram_layer_ids.assign(layer_ids.begin(), layer_ids.end());
  lay.table_rows.assign(L, 0);
  lay.multipliers.assign(L, {});
  lay.primes.assign(L, std::vector<std::vector<int64_t>>(N - 1));
  lay.offsets.assign(L, {});
  layers_.assign(L, Layer());
  for (uint64_t l = 0; l < L; ++l) {
    lay.multipliers[l].assign(multipliers.begin() + l * N, multipliers.begin() + (l + 1) * N);
    if (!rows.empty() && (rows[l] == 0 || rows[l] > kMaxRows)) {
      return bad(prefix, "rows[", l, "] = ", rows[l], " is outside 1..2^48");
    }
    uint64_t sum = 0;  // <= kMaxRows
    for (uint64_t c = 0; c < cols; ++c) {
      const uint64_t p = primes[l * cols + c];
      if (p == 0) return bad(prefix, "primes[", l * cols + c, "] is 0");
      if (p > kMaxRows - sum) {
        return bad(prefix, "primes[", l * cols + c, "] = ", p, " is out of range: layer ",
                   layer_ids[l], "'s primes would sum past 2^48");
      }
      lay.primes[l][c / H].push_back(static_cast<int64_t>(p));
      lay.offsets[l].push_back(static_cast<int64_t>(offsets.empty() ? sum : offsets[l * cols + c]));
      sum += p;
    }
    if (!rows.empty() && sum != rows[l]) {
      return bad("layer ", layer_ids[l], ": primes sum to ", sum, " but ", prefix,
                 h.Find(prefix + "rows") != nullptr ? "rows" : "num_embeddings", " says ", rows[l]);
    }
    lay.table_rows[l] = static_cast<int64_t>(sum);

    const std::string tname = absl::StrCat("blk.", layer_ids[l], ".engram_embd.weight");
    Layer& out = layers_[l];
    const GgufTensorInfo* t = nullptr;
    RETURN_IF_ERROR(FindTable(tname, &out.split, &t));
    auto bad_table = [&](auto&&... parts) {
      return absl::InvalidArgumentError(
          absl::StrCat(files_[out.split], ": tensor ", tname, parts...));
    };
    uint64_t dim0 = values;
    if (ds4) {
      if (t->type != kGgmlTypeI8) {
        return bad_table(" has GGML type ", GgmlTypeName(t->type), "; want I8 (raw ", kEncoding,
                         " rows)");
      }
      out.encoding = RowEncoding::kFp8;
      out.scale_block = kScaleBlock;
      dim0 = kRowBytes;
    } else {
      const std::optional<RowEncoding> e = RowEncodingOfGgmlType(t->type);
      if (!e.has_value() || *e == RowEncoding::kFp8) {
        return bad_table(" has GGML type ", GgmlTypeName(t->type),
                         "; supported: ", SupportedRowEncodings());
      }
      out.encoding = *e;
    }
    if (t->dims.size() != 2 || t->dims[0] != dim0 || t->dims[1] != sum) {
      return bad_table(" has dims ", DimsString(t->dims), "; want ", DimsString({dim0, sum}),
                       ds4 ? " (row bytes" : " (key_length", ", the layer's primes sum)");
    }
    out.head_dim = static_cast<int>(values);
    absl::StatusOr<int> rb = EncodedRowBytes(out.encoding, out.head_dim, out.scale_block);
    if (!rb.ok()) return bad_table(": ", rb.status().message());
    out.row_bytes = *rb;
    // Inside its split: sum * row_bytes may not fit 64 bits, so divide.
    const GgufHeader& sh = headers_[out.split];
    const uint64_t size = sh.file_size;
    const uint64_t begin = t->offset > size - sh.data_start ? size : sh.data_start + t->offset;
    if (t->offset > size - sh.data_start || sum > (size - begin) / out.row_bytes) {
      return absl::DataLossError(absl::StrCat(files_[out.split], ": tensor ", tname, " (", sum,
                                              " rows of ", out.row_bytes, " bytes at data offset ",
                                              t->offset, ") runs past the end of the file (", size,
                                              " bytes); it is truncated"));
    }
    out.offset = begin;
  }
  if (auto s = lay.Validate(); !s.ok()) return bad(s.message());
  const GgufValue* name = h.Find("general.name");
  if (name != nullptr && name->type == GgufType::kString && !name->str.empty()) {
    name_ = name->str;
  }
  return absl::OkStatus();
}

}  // namespace engram
