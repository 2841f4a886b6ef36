#include "shard/import/token_map.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>
#include <unicode/utf8.h>
#include <unicode/utypes.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/util/json_parse.h"

namespace engram {
namespace {

using nlohmann::json;

// GPT-2's bytes_to_unicode, inverted: byte_of[c] is the byte the char U+c
// stands for, or -1. The printable bytes (33..126, 161..172, 174..255)
// stand for themselves; the other 68 are U+0100.. in byte order.
class ByteAlphabet {
 public:
  static constexpr int kChars = 256 + 68;

  ByteAlphabet() {
    byte_of_.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      byte_of_[printable ? b : next++] = static_cast<int16_t>(b);
    }
  }
  // The byte `c` stands for, or -1 when it is not in the alphabet.
  int ByteOf(UChar32 c) const { return c >= 0 && c < kChars ? byte_of_[c] : -1; }

 private:
  std::array<int16_t, kChars> byte_of_;
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet* const alphabet = new ByteAlphabet();
  return *alphabet;
}

// `s` quoted and C-escaped for a one-line message, cut at 64 bytes.
std::string Quote(absl::string_view s) {
  constexpr size_t kMax = 64;
  if (s.size() <= kMax) return absl::StrCat("\"", absl::CHexEscape(s), "\"");
  return absl::StrCat("\"", absl::CHexEscape(s.substr(0, kMax)), "\"...");
}

// Appends the full lower-case mapping of `c` alone (no context) to `out`.
void AppendLower(UChar32 c, icu::UnicodeString& out) {
  if (c < 0x80) {
    out.append(static_cast<UChar>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c));
    return;
  }
  UChar src[U16_MAX_LENGTH];
  int32_t src_len = 0;
  U16_APPEND_UNSAFE(src, src_len, c);
  UChar dst[16];  // a full mapping is at most 3 code points
  UErrorCode err = U_ZERO_ERROR;
  const int32_t n = u_strToLower(dst, 16, src, src_len, /*locale=*/"", &err);
  if (U_FAILURE(err)) {
    out.append(c);  // cannot happen with this buffer; keep the char as is
    return;
  }
  out.append(dst, 0, n);
}

bool IsAsciiBlank(UChar32 c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Step 3 of the rule (token_map.h) on UTF-16 text; UTF-8 out.
std::string Normalize(const icu::UnicodeString& text) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(err);
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(err);
  if (U_FAILURE(err)) return "";  // BuildTokenMap checks these first
  icu::UnicodeString s = nfd->normalize(nfkc->normalize(text, err), err);
  if (U_FAILURE(err)) return "";

  // Drop Mn, lower-case, and turn runs of [ \t\r\n] into one space, in one
  // pass: lower-casing never makes nor takes such a char, and a removed Mn
  // does not end a run.
  icu::UnicodeString folded;
  bool in_blank_run = false;
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    i += U16_LENGTH(c);
    if (u_charType(c) == U_NON_SPACING_MARK) continue;
    if (IsAsciiBlank(c)) {
      if (!in_blank_run) folded.append(static_cast<UChar>(' '));
      in_blank_run = true;
      continue;
    }
    in_blank_run = false;
    AppendLower(c, folded);
  }
  if (folded == icu::UnicodeString(static_cast<UChar>(' '))) return " ";

  int32_t begin = 0, end = folded.length();
  while (begin < end) {
    const UChar32 c = folded.char32At(begin);
    if (!u_isUWhiteSpace(c)) break;
    begin += U16_LENGTH(c);
  }
  while (end > begin) {
    const UChar32 c = folded.char32At(end - 1);
    if (!u_isUWhiteSpace(c)) break;
    end -= U16_LENGTH(c);
  }
  std::string out;
  folded.tempSubStringBetween(begin, end).toUTF8String(out);
  return out;
}

// A token's own string as the tokenizer defines it.
struct Token {
  enum class Kind : uint8_t { kNone, kModel, kAdded };
  Kind kind = Kind::kNone;
  std::string raw;  // model.vocab's string, or the added token's content
};

// A non-negative integer id below kMaxTokenMapVocabSize, else -1.
int64_t IdOf(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t id = v.get<uint64_t>();
    return id < static_cast<uint64_t>(kMaxTokenMapVocabSize) ? static_cast<int64_t>(id) : -1;
  }
  if (v.is_number_integer()) {
    const int64_t id = v.get<int64_t>();
    return id >= 0 && id < kMaxTokenMapVocabSize ? id : -1;
  }
  return -1;
}

std::string TypeOf(const json& v) {
  if (!v.is_object()) return "";
  auto it = v.find("type");
  return it != v.end() && it->is_string() ? it->get<std::string>() : "";
}

// Whether the tokenizer works on GPT-2's byte alphabet: a ByteLevel
// pre-tokenizer (alone or in a Sequence), or all 256 alphabet chars as
// model tokens.
bool IsByteLevelVocabulary(const json& doc, const std::vector<Token>& tokens) {
  if (auto pre = doc.find("pre_tokenizer"); pre != doc.end() && pre->is_object()) {
    if (TypeOf(*pre) == "ByteLevel") return true;
    if (auto seq = pre->find("pretokenizers"); seq != pre->end() && seq->is_array()) {
      for (const json& p : *seq) {
        if (TypeOf(p) == "ByteLevel") return true;
      }
    }
  }
  std::array<bool, ByteAlphabet::kChars> seen{};
  int n_seen = 0;
  for (const Token& t : tokens) {
    if (t.kind != Token::Kind::kModel || t.raw.empty() || t.raw.size() > 2) continue;
    int32_t i = 0;
    UChar32 c;
    U8_NEXT(t.raw.data(), i, static_cast<int32_t>(t.raw.size()), c);
    if (i != static_cast<int32_t>(t.raw.size()) || Alphabet().ByteOf(c) < 0) continue;
    if (!seen[c]) {
      seen[c] = true;
      ++n_seen;
    }
  }
  return n_seen == 256;
}

// The text of model token `raw` through the ByteLevel decoder; sets
// *outside_alphabet when a char of it is not in the byte alphabet.
icu::UnicodeString DecodeByteLevel(const std::string& raw, bool* outside_alphabet) {
  std::string bytes;
  bytes.reserve(raw.size());
  *outside_alphabet = false;
  for (int32_t i = 0, n = static_cast<int32_t>(raw.size()); i < n;) {
    UChar32 c;
    U8_NEXT(raw.data(), i, n, c);
    const int b = Alphabet().ByteOf(c);
    if (b < 0) {
      *outside_alphabet = true;
      bytes = raw;
      break;
    }
    bytes.push_back(static_cast<char>(b));
  }
  // Each ill-formed sequence (maximal subpart) becomes one U+FFFD.
  return icu::UnicodeString::fromUTF8(bytes);
}

absl::StatusOr<TokenMap> Build(const json& doc, const std::string& what, int64_t min_vocab_size) {
  auto bad = [&what](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", parts...));
  };
  if (!doc.is_object()) return bad("tokenizer.json is not a JSON object");
  auto model = doc.find("model");
  if (model == doc.end() || !model->is_object()) return bad("no \"model\" object");
  auto vocab = model->find("vocab");
  if (vocab == model->end() || !vocab->is_object()) return bad("no \"model.vocab\" object");

  // Id -> token: model.vocab, then added_tokens over it (Hugging Face looks
  // an id up in the added vocabulary first).
  std::vector<Token> tokens;
  auto claim = [&tokens](int64_t id) -> Token& {
    if (id >= static_cast<int64_t>(tokens.size())) tokens.resize(id + 1);
    return tokens[id];
  };
  for (const auto& [str, value] : vocab->items()) {
    const int64_t id = IdOf(value);
    if (id < 0) {
      return bad("model.vocab[", Quote(str), "] is not an id in 0..", kMaxTokenMapVocabSize - 1);
    }
    Token& t = claim(id);
    if (t.kind != Token::Kind::kNone) {
      return bad("model.vocab gives id ", id, " to both ", Quote(t.raw), " and ", Quote(str));
    }
    t = {Token::Kind::kModel, str};
  }
  if (auto added = doc.find("added_tokens"); added != doc.end() && !added->is_null()) {
    if (!added->is_array()) return bad("\"added_tokens\" is not an array");
    std::vector<bool> is_added;
    for (size_t i = 0; i < added->size(); ++i) {
      const json& a = (*added)[i];
      auto id_it = a.is_object() ? a.find("id") : a.end();
      auto content = a.is_object() ? a.find("content") : a.end();
      const int64_t id = a.is_object() && id_it != a.end() ? IdOf(*id_it) : -1;
      if (id < 0 || content == a.end() || !content->is_string()) {
        return bad("added_tokens[", i, "] needs an \"id\" in 0..", kMaxTokenMapVocabSize - 1,
                   " and a string \"content\"");
      }
      if (id >= static_cast<int64_t>(is_added.size())) is_added.resize(id + 1);
      if (is_added[id]) return bad("added_tokens gives id ", id, " twice");
      is_added[id] = true;
      claim(id) = {Token::Kind::kAdded, content->get<std::string>()};
    }
  }

  // The decoder: ByteLevel, or none for a vocabulary that is not byte-level.
  bool byte_level = false;
  if (auto decoder = doc.find("decoder"); decoder != doc.end() && !decoder->is_null()) {
    const std::string type = TypeOf(*decoder);
    if (type != "ByteLevel") {
      return bad("unsupported tokenizer decoder ", type.empty() ? "(no type)" : Quote(type),
                 " (only ByteLevel is supported)");
    }
    byte_level = true;
  } else if (IsByteLevelVocabulary(doc, tokens)) {
    return bad("unsupported tokenizer decoder: none, for a byte-level vocabulary");
  }

  TokenMap out;
  out.stats.tokenizer_size = static_cast<int64_t>(tokens.size());
  const int64_t vocab_size = std::max(out.stats.tokenizer_size, min_vocab_size);
  out.token_map.resize(vocab_size);
  absl::flat_hash_map<std::string, int64_t> id_of_key;
  id_of_key.reserve(vocab_size);
  for (int64_t id = 0; id < vocab_size; ++id) {
    const Token* t = id < out.stats.tokenizer_size ? &tokens[id] : nullptr;
    std::string key;  // "" for an id with no token: its decoded text
    if (t == nullptr || t->kind == Token::Kind::kNone) {
      ++out.stats.ids_without_token;
    } else {
      icu::UnicodeString decoded;
      if (t->kind == Token::Kind::kModel && byte_level) {
        bool outside = false;
        decoded = DecodeByteLevel(t->raw, &outside);
        if (outside) ++out.stats.non_byte_level_tokens;
      } else {
        decoded = icu::UnicodeString::fromUTF8(t->raw);
      }
      if (decoded.indexOf(static_cast<UChar>(0xFFFD)) >= 0) {
        ++out.stats.raw_keys;
        key = t->raw;
      } else {
        key = Normalize(decoded);
        if (key.empty()) {
          ++out.stats.empty_fallbacks;
          decoded.toUTF8String(key);
        }
      }
    }
    const int64_t next = static_cast<int64_t>(id_of_key.size());
    out.token_map[id] = id_of_key.try_emplace(std::move(key), next).first->second;
  }
  out.compressed_vocab_size = static_cast<int64_t>(id_of_key.size());
  return out;
}

}  // namespace

std::string NormalizeTokenText(std::string_view text) {
  return Normalize(icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), text.size())));
}

absl::StatusOr<TokenMap> BuildTokenMap(std::string_view tokenizer_json_text,
                                       const std::string& what, int64_t min_vocab_size) {
  if (min_vocab_size < 0 || min_vocab_size > kMaxTokenMapVocabSize) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": min_vocab_size ", min_vocab_size,
                                                   " is not in 0..", kMaxTokenMapVocabSize));
  }
  UErrorCode err = U_ZERO_ERROR;
  icu::Normalizer2::getNFKCInstance(err);
  icu::Normalizer2::getNFDInstance(err);
  if (U_FAILURE(err)) {
    return absl::InternalError(
        absl::StrCat(what, ": ICU has no NFKC/NFD data (", u_errorName(err), ")"));
  }
  absl::StatusOr<json> doc = ParseJson(tokenizer_json_text);
  if (!doc.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", doc.status().message()));
  }
  try {
    return Build(*doc, what, min_vocab_size);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": malformed tokenizer.json (", absl::CHexEscape(e.what()), ")"));
  }
}

}  // namespace engram
