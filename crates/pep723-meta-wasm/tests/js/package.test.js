// Smoke test of the built npm package (target/wasm/pep723-meta, or $PEP723_META_PKG): it loads with
// plain require(), exports the documented functions, returns plain objects, never throws on any
// text, and its web build initializes synchronously. `cargo xtask wasm` runs it after building.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { pathToFileURL } = require('node:url');

const PKG = process.env.PEP723_META_PKG || path.join(__dirname, '..', '..', '..', '..', 'target', 'wasm', 'pep723-meta');
const pep = require(PKG);

const BLOCK = '# /// script\n# requires-python = ">=3.11"\n# dependencies = ["requests>=2.31", "rich"]\n# ///\n';

test('package.json points at the guarded entry and ships both builds', () => {
  const manifest = JSON.parse(fs.readFileSync(path.join(PKG, 'package.json'), 'utf8'));
  assert.equal(manifest.name, 'pep723-meta');
  assert.equal(manifest.main, 'index.js');
  for (const f of ['index.js', 'index.d.ts', 'node/pep723_meta.js', 'node/pep723_meta_bg.wasm', 'web/pep723_meta.js', 'web/pep723_meta_bg.wasm']) {
    assert.ok(fs.existsSync(path.join(PKG, f)), f);
  }
  const dts = fs.readFileSync(path.join(PKG, 'node', 'pep723_meta.d.ts'), 'utf8');
  for (const t of ['export interface Diagnostic', 'export type EditResult', 'export function validate(source: string, opts?: Options): Diagnostic[]']) {
    assert.ok(dts.includes(t), `generated .d.ts lacks \`${t}\``);
  }
});

test('exports every documented function', () => {
  for (const f of ['parse', 'validate', 'addDependency', 'removeDependency', 'setRequiresPython', 'unsetRequiresPython',
    'addSandboxDependency', 'removeSandboxDependency', 'setSandbox', 'unsetSandbox', 'initBlock']) {
    assert.equal(typeof pep[f], 'function', f);
  }
});

test('parse returns plain objects with typed metadata', () => {
  const r = pep.parse(`#!/usr/bin/env python3\n${BLOCK}print(1)\n`);
  assert.equal(r.status, 'ok');
  assert.equal(Object.getPrototypeOf(r), Object.prototype);
  assert.equal(Object.getPrototypeOf(r.toml), Object.prototype, 'tables are objects, not Maps');
  assert.deepEqual(r.metadata.dependencies.map((d) => d.value), ['requests>=2.31', 'rich']);
  assert.equal(r.metadata.requiresPython.value, '>=3.11');
  assert.deepEqual(r.block.opener, { start: { line: 1, character: 0 }, end: { line: 1, character: 12 } });
  assert.deepEqual(r.diagnostics, []);
  assert.equal(pep.parse('print(1)\n').status, 'none');
});

test('diagnostics carry codes, LSP ranges and offsets into the JS string', () => {
  const text = '# 😀 ünïcode\n# /// script\n# dependencies = ["requests>="]\n# ///\n';
  const [d] = pep.validate(text);
  assert.equal(d.code, 'deps/invalid-pep508');
  assert.equal(d.severity, 'error');
  assert.equal(text.slice(d.offset.start, d.offset.end), '>=');
  assert.equal(text.split('\n')[d.range.start.line].slice(d.range.start.character, d.range.end.character), '>=');
  const [u8] = pep.validate(text, { positionEncoding: 'utf-8' });
  assert.equal(Buffer.from(text).subarray(u8.offset.start, u8.offset.end).toString(), '>=');
});

test('edit functions return minimal edits, the new text and its diagnostics', () => {
  const text = 'import os\n';
  const r = pep.addDependency(text, 'httpx');
  assert.equal(r.ok, true);
  assert.equal(r.changed, true);
  assert.ok(r.text.includes('"httpx"'), r.text);
  assert.deepEqual(r.diagnostics, []);
  let applied = text;
  for (const e of [...r.edits].sort((a, b) => b.offset.start - a.offset.start)) {
    applied = applied.slice(0, e.offset.start) + e.newText + applied.slice(e.offset.end);
  }
  assert.equal(applied, r.text);
  const again = pep.addDependency(r.text, 'httpx');
  assert.deepEqual([again.ok, again.changed, again.edits], [true, false, []], 'edits are idempotent');
});

test('refused edits are error objects, not exceptions', () => {
  const bad = pep.addDependency(BLOCK, 'requests>=');
  assert.equal(bad.ok, false);
  assert.equal(bad.error.code, 'edit/invalid-requirement');
  const unknown = pep.setSandbox(BLOCK, 'mount', '/data');
  assert.equal(unknown.error.code, 'edit/unknown-key');
  assert.match(unknown.error.hint, /mounts/);
  const dup = pep.initBlock(BLOCK + 'x = 1\n' + BLOCK);
  assert.equal(dup.error.code, 'edit/duplicate-block');
});

test('options of the wrong shape are API misuse and throw', () => {
  assert.throws(() => pep.validate(BLOCK, { positionEncoding: 'utf-32' }), /invalid options/);
  assert.deepEqual(pep.validate(BLOCK, undefined), []);
  assert.deepEqual(pep.validate(BLOCK, null), []);
});

test('never throws on hostile text', () => {
  const samples = [
    '', '\0', '\ud800', '\udfff# /// script\n', '\ufeff# /// script\n# ///', '# /// script\r# x = 1\r# ///\r',
    '# /// script\n# dependencies = ["x @ ./relative", "y @ file:../z", "z @ C:\\\\w.whl"]\n# ///\n',
    '# /// script\n' + '# a = [\n'.repeat(2000) + '# ///\n',
    '# /// script\n# ///\n'.repeat(5000),
    ('# /// script\n# dependencies = [' + '"a",'.repeat(20000) + ']\n# ///\n'),
    'x'.repeat(3_000_000),
  ];
  for (const s of samples) {
    const parsed = pep.parse(s);
    assert.ok(['none', 'ok', 'invalid'].includes(parsed.status));
    assert.ok(Array.isArray(pep.validate(s)));
    for (const fn of ['addDependency', 'initBlock']) {
      const r = fn === 'initBlock' ? pep.initBlock(s) : pep.addDependency(s, 'rich');
      assert.equal(typeof r.ok, 'boolean');
    }
    for (const d of parsed.diagnostics) {
      assert.notEqual(d.code, 'pep723/internal-error', `${JSON.stringify(s.slice(0, 60))}: ${d.message}`);
    }
  }
});

// pep508_rs expands `${VAR}` in requirements (a pip extension, not PEP 508) and unwraps
// `current_dir()` for `${PROJECT_ROOT}`, which wasm32 cannot provide: a panic, so a trap. Until
// pep723-meta stops handing `${...}` to pep508_rs, index.js contains it: a diagnostic, not an
// exception, and the next call runs on a fresh instance.
test('a trap in the parser is contained and the next call works', () => {
  for (const text of ['# /// script\n# dependencies = ["${PROJECT_ROOT}"]\n# ///\n', '# /// script\n# dependencies = ["x @ ${PROJECT_ROOT}/pkg"]\n# ///\n']) {
    const parsed = pep.parse(text);
    assert.equal(parsed.status, 'invalid');
    assert.ok(parsed.diagnostics.length > 0);
    const crashed = parsed.diagnostics.find((d) => d.code === 'pep723/internal-error');
    if (crashed) assert.match(crashed.message, /internal error in pep723-meta/);
    assert.ok(Array.isArray(pep.validate(text)));
    assert.equal(typeof pep.addDependency(text, 'rich').ok, 'boolean');
    assert.deepEqual(pep.validate(BLOCK), [], 'a fresh instance answers the next call');
  }
});

test('the web build initializes synchronously from bytes', async () => {
  const web = await import(pathToFileURL(path.join(PKG, 'web', 'pep723_meta.js')).href);
  web.initSync({ module: fs.readFileSync(path.join(PKG, 'web', 'pep723_meta_bg.wasm')) });
  assert.equal(web.validate('# /// script\n# x = \n# ///\n')[0].code, 'toml/syntax');
});
