'use strict';
// make-trace end to end (real processes, the real tokenizer) and the
// sectioning rule.

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const zlib = require('node:zlib');
const {describe, test} = require('node:test');

const {runTool, tempDir} = require('../lib/test_support');
const {collectInputs} = require('../lib/corpus');
const {VOCAB_SIZE, loadTokenizer} = require('../lib/tokenizer');
const {splitParagraphs, textToSequences} = require('../lib/trace');

const TEXT = [
  'Engram keeps a static table of n-gram embeddings.\n',
  'Each row is 264 bytes: 256 e4m3 codes and 8 scales.\n',
  '\n',
  'Café, naïve, Ærøskøbing, 中文文本, emoji 🙂 and "quotes" — all survive.\r\n',
  '   \n',
  '\n',
  '    Indented paragraph after blank lines with trailing spaces.   \n',
  '\f\n',
  'Page two starts here.\n',
  'Numbers 1234567 and 3.14159 split into short runs.',
].join('');

// Runs make-trace and returns {r, sequences: number[][]}.
function makeTrace(args) {
  const out = path.join(tempDir(), 'out.trace');
  const r = runTool('make-trace', [...args, '--out', out]);
  assert.equal(r.status, 0, r.stderr);
  const body = fs.readFileSync(out, 'utf8');
  assert.ok(body.endsWith('\n'));
  const sequences = body.slice(0, -1).split('\n').map((line) => {
    assert.match(line, /^\d+( \d+)*$/);
    return line.split(' ').map(Number);
  });
  return {r, sequences};
}

function writeText(dir, name, text) {
  const p = path.join(dir, name);
  fs.mkdirSync(path.dirname(p), {recursive: true});
  fs.writeFileSync(p, text);
  return p;
}

describe('make-trace', () => {
  const tok = loadTokenizer();

  test('writes in-vocabulary ids that decode back to the text', () => {
    const file = writeText(tempDir(), 'doc.txt', TEXT);
    const {r, sequences} = makeTrace([file]);
    for (const seq of sequences) {
      for (const id of seq) assert.ok(id >= 0 && id < VOCAB_SIZE, `id ${id}`);
    }
    assert.equal(sequences.map((s) => tok.decode(s)).join(''), TEXT);
    // The form feed separates two sections; no BOS is added.
    assert.equal(sequences.length, 2);
    assert.ok(tok.decode(sequences[1]).startsWith('Page two'));
    assert.notEqual(sequences[0][0], 0);
    const total = sequences.reduce((n, s) => n + s.length, 0);
    assert.match(r.stderr,
                 new RegExp(`^make-trace: 1 files \\(0\\.00 MiB of text\\), 2 sequences, ${total} tokens -> .*\\n$`));
  });

  test('--max-tokens bounds every sequence', () => {
    const file = writeText(tempDir(), 'doc.txt', TEXT.repeat(5));
    const {sequences} = makeTrace([file, '--max-tokens', '16']);
    assert.ok(sequences.length > 10);
    for (const s of sequences) assert.ok(s.length <= 16, `${s.length} tokens`);
    assert.equal(sequences.map((s) => tok.decode(s)).join(''), TEXT.repeat(5));
  });

  test('a directory means every text file under it, .gz included', () => {
    const dir = tempDir();
    writeText(dir, 'a.txt', 'First file.\n');
    fs.writeFileSync(path.join(dir, 'sub.txt.gz'), zlib.gzipSync('Second file, gzipped.\n'));
    writeText(dir, 'z/c.txt', 'Third file, in a subdirectory.\n');
    fs.writeFileSync(path.join(dir, 'blob.bin'), Buffer.from([0, 159, 146, 150, 0]));
    const {r, sequences} = makeTrace([dir]);
    assert.deepEqual(sequences.map((s) => tok.decode(s)),
                     ['First file.\n', 'Second file, gzipped.\n', 'Third file, in a subdirectory.\n']);
    assert.match(r.stderr, /^make-trace: 3 files \(0\.00 MiB of text, 1 skipped\), 3 sequences, /);
  });

  test('paragraph-wise encoding equals whole-text encoding', () => {
    const paras = splitParagraphs(TEXT);
    assert.equal(paras.map((p) => p.text).join(''), TEXT);
    assert.equal(paras.length, 4);
    assert.deepEqual(textToSequences(TEXT, tok.encode, 1 << 30).flat(), tok.encode(TEXT));
  });
});

describe('make-trace errors', () => {
  const fails = (args, pattern) => {
    const r = runTool('make-trace', args);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, pattern);
    assert.equal(r.stderr.split('\n').length, 2, r.stderr);  // one line
  };

  test('a missing input fails and leaves an existing trace untouched', () => {
    const dir = tempDir();
    const out = writeText(dir, 'old.trace', '1 2 3\n');
    fails([path.join(dir, 'missing.txt'), '--out', out],
          /^make-trace: no such file or directory: .*missing\.txt\n$/);
    assert.equal(fs.readFileSync(out, 'utf8'), '1 2 3\n');
  });

  test('an unwritable --out fails', () => {
    const dir = tempDir();
    const file = writeText(dir, 'doc.txt', 'Some text.\n');
    fails([file, '--out', path.join(dir, 'nope', 'x.trace')], /^make-trace: cannot write --out /);
    fails([file, '--out', dir], /^make-trace: cannot write --out .*it is a directory/);
  });

  test('an explicit binary file, no input, no --out, bad flags fail', () => {
    const dir = tempDir();
    const bin = path.join(dir, 'x.bin');
    fs.writeFileSync(bin, Buffer.from([0, 1, 2]));
    fails([bin, '--out', path.join(dir, 'o')], /^make-trace: .*x\.bin: binary/);
    fails(['--out', path.join(dir, 'o')], /^make-trace: no input/);
    fails([bin], /^make-trace: --out FILE is required/);
    fails([bin, '--out', path.join(dir, 'o'), '--max-tokens', 'many'], /--max-tokens many/);
    fails(['--bogus'], /^make-trace: Unknown option '--bogus'/);
  });
});

describe('default corpus', () => {
  const present = fs.existsSync('/usr/share/common-licenses');
  test('is a deterministic set of several MB', {skip: !present && 'no /usr/share/common-licenses'}, () => {
    const a = collectInputs([], true);
    const b = collectInputs([], true);
    assert.deepEqual(a.files.map((f) => f.path), b.files.map((f) => f.path));
    assert.ok(a.bytes >= 4 * 1024 * 1024, `${a.bytes} bytes`);
    assert.ok(a.files[0].path.startsWith('/usr/share/common-licenses/'));
    const licenses = a.files.filter((f) => f.path.startsWith('/usr/share/common-licenses/'));
    const names = licenses.map((f) => f.path);
    assert.deepEqual(names, [...names].sort());
  });
});
