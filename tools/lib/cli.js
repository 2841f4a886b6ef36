'use strict';
// Small helpers shared by the tools' command lines.

const fs = require('node:fs');
const path = require('node:path');
const {parseArgs} = require('node:util');

// An error whose message is the whole one-line report for the user.
class UsageError extends Error {}

// node:util parseArgs, with its errors turned into UsageError.
function parseCommandLine(argv, options, allowPositionals) {
  try {
    return parseArgs({args: argv, options, allowPositionals, strict: true});
  } catch (e) {
    throw new UsageError(`${e.message} (see --help)`);
  }
}

// Runs main(); prints "<tool>: <message>" and exits 1 on any error (2 for a
// UsageError). Never prints a stack trace for expected failures.
function runMain(tool, main) {
  try {
    main();
  } catch (e) {
    const msg = e instanceof Error ? e.message : String(e);
    process.stderr.write(`${tool}: ${msg.split('\n')[0]}\n`);
    process.exit(e instanceof UsageError ? 2 : 1);
  }
}

// Writes `out` atomically: chunks from writeAll(write) go to a temporary file
// in the same directory, renamed over `out` at the end. An existing `out` is
// left untouched when anything fails. openOutput() checks writability up
// front, so callers can fail before doing expensive work.
function openOutput(out) {
  const dir = path.dirname(path.resolve(out));
  const tmp = path.join(dir, `.${path.basename(out)}.tmp-${process.pid}`);
  try {
    if (fs.existsSync(out) && fs.statSync(out).isDirectory()) {
      throw new Error('it is a directory');
    }
    const fd = fs.openSync(tmp, 'w');
    return {out, tmp, fd};
  } catch (e) {
    throw new UsageError(`cannot write --out ${out}: ${e.code || e.message}` +
                         ' (pass a file path in a writable directory)');
  }
}

function writeOutput(handle, chunk) {
  fs.writeSync(handle.fd, chunk);
}

function commitOutput(handle) {
  fs.closeSync(handle.fd);
  fs.renameSync(handle.tmp, handle.out);
}

function abortOutput(handle) {
  try { fs.closeSync(handle.fd); } catch (e) { /* already closed */ }
  try { fs.unlinkSync(handle.tmp); } catch (e) { /* never created */ }
}

module.exports = {
  UsageError,
  parseCommandLine,
  runMain,
  openOutput,
  writeOutput,
  commitOutput,
  abortOutput,
};
