// pep723-meta: PEP 723 inline script metadata for editors (wasm-bindgen build of the Rust crate).
//
// This file guards the generated bindings in ./node. The Rust build aborts on panic, which reaches
// JS as a WebAssembly.RuntimeError and may leave the instance unusable. A panic is a bug, never a
// reaction to input, but the contract is "malformed input is data": so a trap becomes a
// `pep723/internal-error` diagnostic (or a refused edit) and the next call gets a fresh instance.
// Errors thrown for API misuse (options of the wrong shape) pass through unchanged.
'use strict';

const GLUE = require.resolve('./node/pep723_meta.js');

let bindings = require(GLUE);

function reload() {
  delete require.cache[GLUE];
  bindings = require(GLUE);
}

function crashMessage(error) {
  let note;
  try {
    note = bindings.takeLastPanic();
  } catch {
    note = undefined;
  }
  reload();
  return `internal error in pep723-meta (please report it): ${note || error.message}`;
}

const ZERO = { start: { line: 0, character: 0 }, end: { line: 0, character: 0 } };

function crashDiagnostic(message) {
  return { code: 'pep723/internal-error', severity: 'warning', message, range: ZERO, offset: { start: 0, end: 0 } };
}

function guarded(name, fallback) {
  return function (...args) {
    try {
      return bindings[name](...args);
    } catch (error) {
      if (!(error instanceof WebAssembly.RuntimeError)) throw error;
      return fallback(crashMessage(error), args[0]);
    }
  };
}

const refused = (message) => ({ ok: false, error: { code: 'edit/internal-error', message } });

module.exports = {
  parse: guarded('parse', (message, source) => ({
    status: 'invalid',
    diagnostics: [crashDiagnostic(message)],
    lineEnding: 'lf',
    bom: typeof source === 'string' && source.startsWith('\ufeff'),
  })),
  validate: guarded('validate', (message) => [crashDiagnostic(message)]),
  addDependency: guarded('addDependency', refused),
  removeDependency: guarded('removeDependency', refused),
  setRequiresPython: guarded('setRequiresPython', refused),
  unsetRequiresPython: guarded('unsetRequiresPython', refused),
  addSandboxDependency: guarded('addSandboxDependency', refused),
  removeSandboxDependency: guarded('removeSandboxDependency', refused),
  setSandbox: guarded('setSandbox', refused),
  unsetSandbox: guarded('unsetSandbox', refused),
  initBlock: guarded('initBlock', refused),
};
