'use strict';
// Cutting a text into sequences of token ids for a trace file.
//
// A text is cut into paragraphs right after each run of blank lines (lines
// holding only white space, form feeds included), so the paragraphs
// concatenate back to the text exactly. Cutting just after a newline never
// splits one of the tokenizer's pre-tokens, so encoding paragraph by
// paragraph gives the same ids as encoding the whole text. Paragraphs are
// then grouped greedily into sections of at most maxTokens tokens; a
// separator holding a form feed (a page break) always starts a new section,
// and a paragraph longer than maxTokens is cut into maxTokens-token pieces.

const DEFAULT_MAX_TOKENS = 4096;

const BLANK_RUN = /\n(?:[^\S\n]*\n)+/g;

// [{text, pageBreak}] whose texts concatenate to `text`; pageBreak marks a
// paragraph that ends in a separator holding a form feed.
function splitParagraphs(text) {
  const out = [];
  let start = 0;
  for (const m of text.matchAll(BLANK_RUN)) {
    const end = m.index + m[0].length;
    out.push({text: text.slice(start, end), pageBreak: m[0].includes('\f')});
    start = end;
  }
  if (start < text.length) out.push({text: text.slice(start), pageBreak: false});
  return out;
}

// Sections of `text` as arrays of token ids (none empty), in text order.
function textToSequences(text, encode, maxTokens = DEFAULT_MAX_TOKENS) {
  const sequences = [];
  let current = [];
  const flush = () => {
    if (current.length > 0) sequences.push(current);
    current = [];
  };
  for (const para of splitParagraphs(text)) {
    const ids = encode(para.text);
    if (current.length + ids.length > maxTokens) flush();
    if (ids.length > maxTokens) {
      for (let i = 0; i < ids.length; i += maxTokens) {
        current = ids.slice(i, i + maxTokens);
        if (current.length === maxTokens) flush();
      }
    } else {
      for (const id of ids) current.push(id);
    }
    if (para.pageBreak) flush();
  }
  flush();
  return sequences;
}

module.exports = {DEFAULT_MAX_TOKENS, splitParagraphs, textToSequences};
