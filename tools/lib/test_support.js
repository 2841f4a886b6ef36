'use strict';
// Shared by tools/test/*.test.js: temp dirs and running a tool as a process.

const {spawnSync} = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const TOOLS = path.join(__dirname, '..');  // tools/

// A fresh temporary directory, removed when the test process exits.
function tempDir() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'engram-tools-test-'));
  process.on('exit', () => fs.rmSync(dir, {recursive: true, force: true}));
  return dir;
}

// Runs tools/<tool> with `args`; returns {status, stdout, stderr}.
function runTool(tool, args) {
  const r = spawnSync(path.join(TOOLS, tool), args, {encoding: 'utf8'});
  if (r.error) throw r.error;
  return {status: r.status, stdout: r.stdout, stderr: r.stderr};
}

module.exports = {TOOLS, tempDir, runTool};
