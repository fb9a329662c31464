// Loads the pep723-meta WASM package that `cargo xtask wasm` copies into ./wasm (never a stand-in:
// without the real build the extension reports why and does nothing).
'use strict';

const path = require('node:path');

const PACKAGE = path.join(__dirname, '..', 'wasm', 'pep723-meta');

function load() {
  try {
    return require(PACKAGE);
  } catch (e) {
    const err = new Error(`cannot load the pep723-meta wasm package from ${PACKAGE}: ${e.message}\nhint: run \`cargo xtask wasm\` in the python-sandbox repository`);
    err.cause = e;
    throw err;
  }
}

module.exports = { PACKAGE, load };
