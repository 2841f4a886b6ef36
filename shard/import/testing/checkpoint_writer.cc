#include "shard/import/testing/checkpoint_writer.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/format/safetensors.h"
#include "common/format/table.h"
#include "common/util/file_util.h"
#include "common/util/status_macros.h"
#include "shard/import/checkpoint_config.h"
#include "shard/import/token_map.h"

namespace engram::testing {
namespace {

using nlohmann::json;

uint64_t Mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// GPT-2's byte-level alphabet: byte b -> the code point standing for it.
std::string ByteLevel(std::string_view text) {
  std::string out;
  for (unsigned char b : text) {
    uint32_t cp = b;
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (!printable) {
      uint32_t n = 0;  // rank of b among the non-printable bytes
      for (uint32_t c = 0; c < b; ++c) {
        const bool p = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
        if (!p) ++n;
      }
      cp = 256 + n;
    }
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {  // every code point here is below 0x800
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

// A small DeepSeek-style tokenizer.json: three special tokens at ids 0..2,
// a byte-level vocabulary from 3 on, one added non-special token last.
std::string TokenizerJson() {
  const std::vector<std::string> texts = {"a",
                                          " a",
                                          "A",
                                          "hello",
                                          " Hello",
                                          "\xC3\xA9" /* é */,
                                          "\xC3\x89" /* É */,
                                          "e",
                                          " ",
                                          "  ",
                                          "\n",
                                          "\t\t",
                                          "b",
                                          "\xC3" /* half of é */,
                                          "x y",
                                          "caf\xC3\xA9",
                                          " cafe",
                                          "\xE2\x80\x94"};
  json vocab = json::object();
  int64_t id = 3;
  for (const std::string& t : texts) vocab[ByteLevel(t)] = id++;
  json added = json::array();
  const char* specials[] = {
      "<\xEF\xBD\x9C"
      "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
      "<\xEF\xBD\x9C"
      "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
      "<\xEF\xBD\x9C\xE2\x96\x81pad\xE2\x96\x81\xEF\xBD\x9C>"};
  for (int i = 0; i < 3; ++i) {
    added.push_back({{"id", i}, {"content", specials[i]}, {"special", true}});
  }
  added.push_back({{"id", id}, {"content", "<think>"}, {"special", false}});
  json j = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
  return j.dump(2);
}

struct Tensor {
  std::string name, dtype;
  std::vector<uint64_t> shape;
  std::string data;
};

absl::Status WriteSafetensors(const std::string& path, const std::vector<Tensor>& tensors) {
  std::vector<SafetensorsTensor> infos;
  uint64_t at = 0;
  for (const Tensor& t : tensors) {
    infos.push_back({t.name, t.dtype, t.shape, at, at + t.data.size()});
    at += t.data.size();
  }
  std::string file = BuildSafetensorsHeader(infos, {{"format", "pt"}});
  for (const Tensor& t : tensors) file += t.data;
  return WriteFileAtomically(path, file);
}

std::string Filler(size_t bytes, uint64_t seed) {
  std::string s(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) s[i] = static_cast<char>(Mix(seed + i) & 0x3F);
  return s;
}

}  // namespace

std::string FixtureFp8Row(const CheckpointFixture& f, int layer, uint64_t row) {
  const int scales = f.head_dim / f.scale_block;
  std::string out(static_cast<size_t>(f.head_dim + scales), '\0');
  const uint64_t base = Mix(f.seed ^ (uint64_t(layer) << 56) ^ row);
  for (int j = 0; j < f.head_dim; ++j) {
    uint8_t code = static_cast<uint8_t>(Mix(base + static_cast<uint64_t>(j)));
    if ((code & 0x7F) == 0x7F) code ^= 1;  // never the NaN codes
    out[static_cast<size_t>(j)] = static_cast<char>(code);
  }
  for (int k = 0; k < scales; ++k) {
    out[static_cast<size_t>(f.head_dim + k)] =
        static_cast<char>(119 + Mix(base ^ (0xABCDull + static_cast<uint64_t>(k))) % 12);
  }
  return out;
}

std::vector<uint64_t> FixtureLayerRows(const CheckpointFixture& f) {
  const auto primes = DerivePrimes(static_cast<int>(f.layer_ids.size()), f.max_ngram_size - 1,
                                   f.n_heads, f.engram_vocab_size);
  std::vector<uint64_t> rows;
  for (const auto& layer : primes) {
    uint64_t sum = 0;
    for (const auto& order : layer) {
      for (int64_t p : order) sum += static_cast<uint64_t>(p);
    }
    rows.push_back(sum);
  }
  return rows;
}

absl::StatusOr<HashLayout> FixtureLayout(const CheckpointFixture& f) {
  ASSIGN_OR_RETURN(TokenMap tokens, BuildTokenMap(TokenizerJson(), "fixture tokenizer.json"));
  EngramConfig c;
  c.layer_ids = f.layer_ids;
  c.num_embeddings = FixtureLayerRows(f);
  c.max_ngram_size = f.max_ngram_size;
  c.n_heads = f.n_heads;
  c.head_dim = f.head_dim;
  c.vocab_size = f.engram_vocab_size;
  c.compressed_vocab_size = tokens.compressed_vocab_size;
  c.pad_token_id = 2;
  const int64_t pad = tokens.token_map[2];
  return DeriveHashLayout(c, std::move(tokens.token_map), pad);
}

absl::Status WriteCheckpoint(const std::string& dir, const CheckpointFixture& f) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const std::string tokenizer = TokenizerJson();
  ASSIGN_OR_RETURN(TokenMap tokens, BuildTokenMap(tokenizer, "fixture tokenizer.json"));
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/tokenizer.json", tokenizer));

  std::vector<uint64_t> rows = FixtureLayerRows(f);
  json num = json::array();
  for (size_t l = 0; l < rows.size(); ++l) {
    const int64_t delta = l + 1 == rows.size() ? f.num_embeddings_delta : 0;
    num.push_back(static_cast<int64_t>(rows[l]) + delta);
  }
  const json config = {
      {"architectures", {"DeepseekV41ForCausalLM"}},
      {"model_type", "deepseek_v41"},
      {"text_config",
       {{"vocab_size", 64},
        {"hidden_size", 32},
        {"engram_layer_ids", f.layer_ids},
        {"engram_num_embeddings", num},
        {"engram_max_ngram_size", f.max_ngram_size},
        {"engram_n_heads", f.n_heads},
        {"engram_head_dim", f.head_dim},
        {"engram_vocab_size", f.engram_vocab_size},
        {"engram_compressed_vocab_size", tokens.compressed_vocab_size + f.compressed_vocab_delta},
        {"engram_pad_token_id", 2}}}};
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/config.json", config.dump(2)));

  std::vector<std::vector<Tensor>> files(2);
  for (size_t l = 0; l < f.layer_ids.size(); ++l) {
    std::vector<Tensor>& file = files[std::min<size_t>(l, 1)];
    const int64_t id = f.layer_ids[l];
    const uint64_t n = rows[l];
    const int scales = f.head_dim / f.scale_block;
    Tensor w{EngramWeightTensorName(id), kWeightDtype, {n, uint64_t(f.head_dim)}, ""};
    Tensor s{EngramScaleTensorName(id), kScaleDtype, {n, uint64_t(scales)}, ""};
    for (uint64_t r = 0; r < n; ++r) {
      const std::string row = FixtureFp8Row(f, static_cast<int>(l), r);
      w.data.append(row, 0, static_cast<size_t>(f.head_dim));
      s.data.append(row, static_cast<size_t>(f.head_dim), static_cast<size_t>(scales));
    }
    if (l == 0 && f.wrong_weight_dtype) {
      w.dtype = "BF16";
      w.shape[1] /= 2;
    }
    if (l + 1 == f.layer_ids.size() && f.wrong_scale_shape) {
      s.shape[0] -= 1;
      s.data.resize(s.data.size() - static_cast<size_t>(scales));
    }
    const std::string p = absl::StrCat("layers.", id, ".");
    file.push_back({p + "engram.wkv.weight", "BF16", {8, 8}, Filler(128, id)});
    file.push_back(std::move(w));
    file.push_back({p + "engram.q_weight", "BF16", {4, 8}, Filler(64, id + 1)});
    file.push_back(std::move(s));
    file.push_back({p + "engram.k_weight", "BF16", {4, 8}, Filler(64, id + 2)});
    file.push_back({p + "self_attn.o_proj.weight", "BF16", {8, 8}, Filler(128, id + 3)});
  }
  if (f.single_file) {
    std::vector<Tensor> all = files[0];
    for (Tensor& t : files[1]) all.push_back(std::move(t));
    return WriteSafetensors(dir + "/model.safetensors", all);
  }
  json weight_map = json::object();
  for (int k = 0; k < 2; ++k) {
    const std::string name = absl::StrCat("model-0000", k + 1, "-of-00002.safetensors");
    for (const Tensor& t : files[k]) weight_map[t.name] = name;
    if (k == 1 && f.drop_second_shard) continue;
    RETURN_IF_ERROR(WriteSafetensors(dir + "/" + name, files[k]));
  }
  const json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  return WriteFileAtomically(dir + "/model.safetensors.index.json", index.dump(2));
}

}  // namespace engram::testing
