// The Engram token map (token id -> normalised id) of a checkpoint, built
// from its tokenizer.json as every engine builds it. `engramctl import
// --checkpoint DIR` uses it; tools/make-token-map is the same rule in
// Node.js (docs/tokens.md).
//
// The rule. For ids 0..V-1, where V = len(tokenizer) = 1 + the largest id
// over model.vocab and added_tokens:
//
//  1. Decode the id alone, as Hugging Face's
//     tokenizer.decode([id], skip_special_tokens=False) does: an added
//     token (special or not) decodes to its content; a model token goes
//     through the decoder, which must be ByteLevel: each char of the vocab
//     string maps back through GPT-2's bytes_to_unicode table to a byte (if
//     any char is not in the table, the token's own UTF-8 bytes are used),
//     and the bytes decode as UTF-8 with each invalid sequence replaced by
//     U+FFFD (Rust's String::from_utf8_lossy). An id with no token decodes
//     to "". (Hugging Face's Rust decode also sends added tokens through
//     ByteLevel; that agrees with "their content" unless the content is
//     made only of byte-alphabet chars, some non-ASCII, e.g. "đem"; none
//     of DeepSeek-V3's added tokens is.)
//  2. If the text holds U+FFFD (a partial UTF-8 token), the key is the raw
//     vocabulary string (the added token's content for an added token).
//  3. Otherwise the key is NormalizeTokenText(text): NFKC, NFD, remove
//     general category Mn, lower-case each code point alone (full mapping,
//     no context such as the final sigma), turn each run of [ \t\r\n] into
//     one space; a text that is then exactly " " stays " ", anything else
//     loses leading and trailing Unicode White_Space. If that is "", the
//     key is the decoded text itself.
//  4. All keys share one namespace (a raw key can equal a normalised one).
//     Normalised ids are dense from 0, in order of first appearance over
//     ids 0..V-1.
//
// The pad id of a layout is token_map[pad_token_id] (token 2 for
// DeepSeek's tokenizers); the caller picks pad_token_id.
#ifndef ENGRAM_SHARD_IMPORT_TOKEN_MAP_H_
#define ENGRAM_SHARD_IMPORT_TOKEN_MAP_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace engram {

// The largest V BuildTokenMap accepts (ids and min_vocab_size alike).
inline constexpr int64_t kMaxTokenMapVocabSize = int64_t{1} << 24;

struct TokenMap {
  // token_map[t] is the normalised id of token t, for t in 0..V-1.
  std::vector<int64_t> token_map;
  // Distinct normalised ids (1 + the largest value of token_map).
  int64_t compressed_vocab_size = 0;

  // How the keys came about; ids the tokenizer defines count in at most one
  // of raw_keys and empty_fallbacks.
  struct Stats {
    // len(tokenizer): 1 + the largest id the tokenizer defines.
    int64_t tokenizer_size = 0;
    // Tokens whose decoded text holds U+FFFD, keyed on their raw string.
    int64_t raw_keys = 0;
    // Tokens that normalise to "", keyed on their decoded text.
    int64_t empty_fallbacks = 0;
    // Ids in 0..V-1 with no token (holes, and ids past len(tokenizer) when
    // min_vocab_size extends V); they decode to "".
    int64_t ids_without_token = 0;
    // Model tokens holding a char outside the byte-level alphabet, decoded
    // from their own UTF-8 bytes.
    int64_t non_byte_level_tokens = 0;
  } stats;
};

// Builds the token map of the tokenizer.json document `tokenizer_json_text`
// over ids 0..V-1, V = max(len(tokenizer), min_vocab_size): a caller
// extends V to the model's embedding size (DeepSeek-V3/V4.1: 129,280 rows
// for a 128,815-id tokenizer); the extra ids decode to "".
//
// InvalidArgument, one line starting with `what` (e.g. the file's path),
// when the text is not JSON, model.vocab is missing or not an object of
// non-negative integer ids, two tokens claim one id, added_tokens is
// malformed, V would exceed kMaxTokenMapVocabSize, min_vocab_size < 0, or
// the decoder is unsupported: anything but ByteLevel (the error names the
// type), or no decoder with a byte-level vocabulary (a ByteLevel
// pre-tokenizer, or all 256 byte-alphabet chars as tokens). Without a
// decoder, other vocabularies decode each token to its own string.
// Internal if ICU lacks its normalisation data. Thread-safe; ~0.3 s for
// DeepSeek-V3's 7.8 MB tokenizer.json.
absl::StatusOr<TokenMap> BuildTokenMap(std::string_view tokenizer_json_text,
                                       const std::string& what, int64_t min_vocab_size = 0);

// Step 3 of the rule on a UTF-8 text (ill-formed sequences are read as
// U+FFFD): NFKC, NFD, no Mn, per-code-point lower case, [ \t\r\n]+ -> " ",
// then " " stays " " and anything else is trimmed of White_Space. May
// return "" (also, silently, if ICU lacks its data). Thread-safe.
std::string NormalizeTokenText(std::string_view text);

}  // namespace engram

#endif  // ENGRAM_SHARD_IMPORT_TOKEN_MAP_H_
