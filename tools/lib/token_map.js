'use strict';
// The tokenizer compression of DeepSeek-V4.1's Engram: token ids whose text
// is equal after normalisation share one "normalised id". See docs/tokens.md.

// The released V4.1 figure: 129,280 token ids -> 99,092 normalised ids.
const RELEASED_COMPRESSED_SIZE = 99092;
// The token whose normalised id pads n-grams at the start of a sequence.
const PAD_TOKEN_ID = 2;

// Lower-cases code point by code point (no context rules such as the Greek
// final sigma), as the Hugging Face Lowercase normaliser does.
function lowerCodePoints(s) {
  let out = '';
  for (const c of s) out += c.toLowerCase();
  return out;
}

// NFKC, NFD, drop combining accents (category Mn), lower-case, collapse runs
// of space/tab/CR/LF into one space, trim Unicode white space; a text that is
// then a single space stays a single space. May return ''.
function normalizeTokenText(text) {
  let s = text.normalize('NFKC').normalize('NFD').replace(/\p{Mn}/gu, '');
  s = lowerCodePoints(s).replace(/[ \t\r\n]+/g, ' ');
  if (s === ' ') return s;
  return s.replace(/^\p{White_Space}+|\p{White_Space}+$/gu, '');
}

// The key that decides which token ids share a normalised id. `decoded` is
// the text of the token alone; `raw` is the vocabulary's string for it.
// A decoded text holding U+FFFD (a partial UTF-8 sequence) keys on the raw
// string; an empty normalisation falls back to the decoded text.
function tokenKey(decoded, raw) {
  if (decoded.includes('\uFFFD')) return raw;
  const n = normalizeTokenText(decoded);
  return n === '' ? decoded : n;
}

// Builds the map for token ids 0..vocabSize-1 of `tokenizer` (see
// lib/tokenizer.js). Normalised ids are dense from 0, in order of first
// appearance. Returns the file's fields {vocab_size, compressed_vocab_size,
// pad_id, token_map} plus `stats`: how many defined tokens were keyed on
// their raw string, how many normalised to '' and kept their decoded text,
// and how many ids lie beyond the tokenizer (not part of the file format).
function buildTokenMap(tokenizer, vocabSize) {
  const tokenMap = new Array(vocabSize);
  const idOfKey = new Map();
  const stats = {raw_keys: 0, empty_fallbacks: 0, undefined_ids: 0};
  for (let id = 0; id < vocabSize; ++id) {
    const decoded = tokenizer.decode([id]);
    if (id >= tokenizer.definedSize) stats.undefined_ids++;
    else if (decoded.includes('\uFFFD')) stats.raw_keys++;
    else if (normalizeTokenText(decoded) === '') stats.empty_fallbacks++;
    const key = tokenKey(decoded, tokenizer.rawToken(id));
    let nid = idOfKey.get(key);
    if (nid === undefined) {
      nid = idOfKey.size;
      idOfKey.set(key, nid);
    }
    tokenMap[id] = nid;
  }
  return {
    vocab_size: vocabSize,
    compressed_vocab_size: idOfKey.size,
    pad_id: tokenMap[PAD_TOKEN_ID],
    token_map: tokenMap,
    stats,
  };
}

// "diff D = X%" relative to the released figure, X with three decimals.
function describeDiff(size) {
  const d = size - RELEASED_COMPRESSED_SIZE;
  const pct = (100 * d) / RELEASED_COMPRESSED_SIZE;
  const sign = d > 0 ? '+' : '';
  return `diff ${sign}${d} = ${sign}${pct.toFixed(3)}%`;
}

module.exports = {
  RELEASED_COMPRESSED_SIZE,
  PAD_TOKEN_ID,
  normalizeTokenText,
  tokenKey,
  buildTokenMap,
  describeDiff,
};
