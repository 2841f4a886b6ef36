'use strict';
// make-token-map end to end (a real process, the real vocabulary) plus the
// normalisation rules one by one.

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const {before, describe, test} = require('node:test');

const {runTool, tempDir} = require('../lib/test_support');
const {VOCAB_SIZE, loadTokenizer} = require('../lib/tokenizer');
const {RELEASED_COMPRESSED_SIZE, normalizeTokenText, tokenKey} =
    require('../lib/token_map');

describe('make-token-map output', () => {
  let run;
  let map;
  let tok;
  before(() => {
    const out = path.join(tempDir(), 'token_map.json');
    run = runTool('make-token-map', ['--out', out]);
    assert.equal(run.status, 0, run.stderr);
    map = JSON.parse(fs.readFileSync(out, 'utf8'));
    tok = loadTokenizer();
  });

  // The normalised id of `text`, which must be a single token.
  const idOf = (text) => {
    const ids = tok.encode(text);
    assert.equal(ids.length, 1, `${JSON.stringify(text)} is not one token: ${ids}`);
    return map.token_map[ids[0]];
  };

  test('has the documented shape', () => {
    assert.deepEqual(Object.keys(map),
                     ['vocab_size', 'compressed_vocab_size', 'pad_id', 'token_map']);
    assert.equal(map.vocab_size, 129280);
    assert.equal(map.token_map.length, 129280);
    assert.ok(map.token_map.every(Number.isInteger));
  });

  test('ids are dense from 0 in order of first appearance', () => {
    let next = 0;
    for (const [t, v] of map.token_map.entries()) {
      assert.ok(v >= 0 && v <= next, `token ${t} -> ${v}, next new id is ${next}`);
      if (v === next) next++;
    }
    assert.equal(next, map.compressed_vocab_size);
  });

  test('pad_id is the normalised id of token 2', () => {
    assert.equal(map.pad_id, map.token_map[2]);
    assert.equal(map.pad_id, 2);
  });

  test('compressed size is within 0.1% of the released 99,092', () => {
    const rel = Math.abs(map.compressed_vocab_size - RELEASED_COMPRESSED_SIZE) /
        RELEASED_COMPRESSED_SIZE;
    assert.ok(rel < 0.001, `${map.compressed_vocab_size} vs ${RELEASED_COMPRESSED_SIZE}`);
  });

  test('prints the comparison line', () => {
    const m = /^make-token-map: 129280 tokens -> (\d+) normalised ids \(released V4\.1: 99092; diff ([+-]?\d+) = [+-]?\d+\.\d{3}%\)\n$/
        .exec(run.stdout);
    assert.ok(m, run.stdout);
    assert.equal(Number(m[1]), map.compressed_vocab_size);
    assert.equal(Number(m[2]), map.compressed_vocab_size - 99092);
  });

  test('case and a leading space fold together', () => {
    const hello = idOf('hello');
    for (const t of [' Hello', 'Hello', ' hello']) assert.equal(idOf(t), hello, t);
    assert.notEqual(idOf(' world'), hello);
  });

  test('accented letters fold onto the bare letter', () => {
    assert.equal(idOf('é'), idOf('e'));
    assert.equal(idOf('É'), idOf('e'));
    assert.equal(idOf(' café'), idOf(' cafe'));
    assert.equal(idOf(' über'), idOf(' uber'));
    assert.equal(idOf(' naïve'), idOf(' naive'));
  });

  test('white space tokens fold onto a single space', () => {
    const space = idOf(' ');
    for (const t of ['  ', '\n', '\n\n', '\t']) assert.equal(idOf(t), space, JSON.stringify(t));
  });

  test('partial UTF-8 tokens key on their raw vocabulary string', () => {
    const partial = [];
    for (let id = 0; id < tok.definedSize && partial.length < 200; ++id) {
      if (tok.decode([id]).includes('\uFFFD')) partial.push(id);
    }
    assert.ok(partial.length >= 2);
    // All decode to U+FFFD, yet distinct raw strings keep distinct ids.
    const byRaw = new Map(partial.map((id) => [tok.rawToken(id), map.token_map[id]]));
    assert.equal(new Set(byRaw.values()).size, byRaw.size);
    // The raw key lives in the same key space as normalised text: the lone
    // byte 0xB7 (raw "·") shares an id with the character "·" (raw "Â·").
    assert.equal(tok.rawToken(118), '·');
    assert.equal(map.token_map[118], idOf('·'));
  });

  test('special tokens stay apart; ids past the tokenizer share one id', () => {
    assert.equal(new Set(map.token_map.slice(0, 3)).size, 3);
    const beyond = map.token_map.slice(tok.definedSize);
    assert.equal(beyond.length, VOCAB_SIZE - tok.definedSize);
    assert.equal(new Set(beyond).size, 1);
  });
});

describe('normalizeTokenText', () => {
  const cases = [
    [' Hello', 'hello'], ['Café', 'cafe'], ['NAÏVE', 'naive'],
    ['ﬁ', 'fi'], ['Ｈｅｌｌｏ', 'hello'], ['Ⅻ', 'xii'], ['\u00a0x', 'x'],
    [' ', ' '], ['  ', ' '], ['\n\n', ' '], ['\t \r\n', ' '],
    ['a \t\nb', 'a b'], ['  x  ', 'x'], ['\u0301', ''], ['', ''],
    ['ΣΑΣ', 'σασ'],
  ];
  for (const [input, want] of cases) {
    test(`${JSON.stringify(input)} -> ${JSON.stringify(want)}`, () => {
      assert.equal(normalizeTokenText(input), want);
    });
  }

  test('tokenKey uses the raw string for U+FFFD and falls back on empty', () => {
    assert.equal(tokenKey('\uFFFD', 'Ã'), 'Ã');
    assert.equal(tokenKey('\u0301', 'raw'), '\u0301');
    assert.equal(tokenKey(' The', 'ĠThe'), 'the');
  });
});

describe('make-token-map errors', () => {
  test('missing --out', () => {
    const r = runTool('make-token-map', []);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /^make-token-map: --out FILE is required.*\n$/);
  });

  test('unwritable --out leaves nothing behind', () => {
    const dir = tempDir();
    const r = runTool('make-token-map', ['--out', path.join(dir, 'no', 'such', 'dir.json')]);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /^make-token-map: cannot write --out .*\n$/);
    assert.deepEqual(fs.readdirSync(dir), []);
  });
});
