'use strict';
// Finding and reading the text files make-trace tokenises.

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const zlib = require('node:zlib');

const {UsageError} = require('./cli');

// The default corpus: text that ships in Debian packages. Candidates, in
// this order, each group in sorted path order:
//   1. every file in /usr/share/common-licenses/
//   2. /usr/share/doc/<package>/copyright
//   3. /usr/share/doc/<package>/<name>[.gz] for <name> in DOC_NAMES
// Missing files, files that are not UTF-8 text, files over MAX_FILE_BYTES of
// text, and files whose real path or content was already taken are skipped.
// Collection stops at the first file that brings the total to BUDGET_BYTES
// (that file is kept). Sizes are bytes of (gunzipped) UTF-8 text.
const LICENSE_DIR = '/usr/share/common-licenses';
const DOC_DIR = '/usr/share/doc';
const DOC_NAMES = ['NEWS', 'NEWS.Debian', 'README', 'README.Debian',
                   'README.md', 'changelog', 'changelog.Debian'];
const MiB = 1024 * 1024;
const BUDGET_BYTES = 8 * MiB;
const MAX_FILE_BYTES = 1 * MiB;

const utf8 = new TextDecoder('utf-8', {fatal: true});

// Reads `file` (gunzipped in-process when it ends in .gz). Returns
// {text, bytes} for UTF-8 text without NUL bytes, or {skip: reason}.
function readTextFile(file) {
  let buf;
  try {
    buf = fs.readFileSync(file);
    if (file.endsWith('.gz')) buf = zlib.gunzipSync(buf);
  } catch (e) {
    const zlibError = typeof e.code === 'string' && e.code.startsWith('Z_');
    return {skip: zlibError ? 'not valid gzip data' : (e.code || e.message)};
  }
  if (buf.includes(0)) return {skip: 'binary (NUL bytes)'};
  try {
    return {text: utf8.decode(buf), bytes: buf.length};
  } catch (e) {
    return {skip: 'not UTF-8 text'};
  }
}

// Regular files under `dir`, recursively, in sorted order (symlinks
// followed; each real directory visited once).
function walk(dir, seenDirs, out) {
  const real = fs.realpathSync(dir);
  if (seenDirs.has(real)) return;
  seenDirs.add(real);
  for (const name of fs.readdirSync(dir).sort()) {
    const p = path.join(dir, name);
    let st;
    try {
      st = fs.statSync(p);
    } catch (e) {
      continue;  // dangling symlink
    }
    if (st.isDirectory()) walk(p, seenDirs, out);
    else if (st.isFile()) out.push(p);
  }
}

// Accumulates files, dropping repeats by real path and by content.
class FileSet {
  constructor() {
    this.files = [];      // [{path, text, bytes}]
    this.bytes = 0;
    this.skipped = 0;     // files left out as not text or too large
    this.realPaths = new Set();
    this.digests = new Set();
  }

  // Adds `file` unless it was seen. A file that is not text (or is over
  // maxBytes) is counted in `skipped`, or is an error when `explicit`.
  add(file, explicit, maxBytes = Infinity) {
    const real = fs.realpathSync(file);
    if (this.realPaths.has(real)) return;
    this.realPaths.add(real);
    const r = readTextFile(file);
    if (r.skip !== undefined || r.bytes > maxBytes) {
      if (explicit) {
        throw new UsageError(`${file}: ${r.skip || 'too large'}; pass UTF-8 text files`);
      }
      this.skipped++;
      return;
    }
    const digest = crypto.createHash('sha256').update(r.text).digest('hex');
    if (this.digests.has(digest)) return;
    this.digests.add(digest);
    this.files.push({path: file, text: r.text, bytes: r.bytes});
    this.bytes += r.bytes;
  }
}

function listDir(dir) {
  try {
    return fs.readdirSync(dir).sort();
  } catch (e) {
    return [];
  }
}

function isFile(p) {
  try {
    return fs.statSync(p).isFile();
  } catch (e) {
    return false;
  }
}

// The default corpus's candidate paths, in the documented order.
function defaultCorpusCandidates() {
  const out = listDir(LICENSE_DIR).map((n) => path.join(LICENSE_DIR, n));
  const packages = listDir(DOC_DIR);
  for (const pkg of packages) out.push(path.join(DOC_DIR, pkg, 'copyright'));
  for (const pkg of packages) {
    for (const name of DOC_NAMES) {
      out.push(path.join(DOC_DIR, pkg, name), path.join(DOC_DIR, pkg, `${name}.gz`));
    }
  }
  return out;
}

// Collects the default corpus (when `useDefault`) and then every file named
// by `inputs` (files, or directories meaning every text file under them).
// Throws UsageError for a missing input or an explicit file that is not text.
function collectInputs(inputs, useDefault) {
  const set = new FileSet();
  if (useDefault) {
    for (const p of defaultCorpusCandidates()) {
      if (set.bytes >= BUDGET_BYTES) break;
      if (isFile(p)) set.add(p, false, MAX_FILE_BYTES);
    }
  }
  for (const input of inputs) {
    let st;
    try {
      st = fs.statSync(input);
    } catch (e) {
      throw new UsageError(`no such file or directory: ${input}`);
    }
    if (st.isDirectory()) {
      const files = [];
      walk(input, new Set(), files);
      for (const f of files) set.add(f, false);
    } else if (st.isFile()) {
      set.add(input, true);
    } else {
      throw new UsageError(`${input} is not a regular file or directory`);
    }
  }
  return set;
}

module.exports = {
  readTextFile,
  collectInputs,
};
