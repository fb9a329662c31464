// The packaged extension as VS Code installs it: `cargo xtask vsix` packages it with @vscode/vsce,
// unpacks the .vsix and sets PEP723_EXTENSION_DIR to its `extension/` folder (extension.test.js
// then activates that copy). Without it these tests are skipped with the reason.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const EXTENSION = process.env.PEP723_EXTENSION_DIR;
const skip = EXTENSION ? false : 'SKIPPED: no PEP723_EXTENSION_DIR (run `cargo xtask vsix` to test the packaged .vsix)';

function files(dir, prefix = '') {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(path.join(dir, e.name), `${prefix}${e.name}/`) : [`${prefix}${e.name}`],
  );
}

test('the vsix manifest names the extension of package.json', { skip }, () => {
  const manifest = JSON.parse(fs.readFileSync(path.join(EXTENSION, 'package.json'), 'utf8'));
  const root = path.dirname(EXTENSION);
  assert.ok(fs.existsSync(path.join(root, '[Content_Types].xml')));
  const xml = fs.readFileSync(path.join(root, 'extension.vsixmanifest'), 'utf8');
  const identity = xml.match(/<Identity\b[^>]*>/);
  assert.ok(identity, xml);
  for (const [attr, want] of [['Id', manifest.name], ['Version', manifest.version], ['Publisher', manifest.publisher]]) {
    assert.match(identity[0], new RegExp(`${attr}="${want.replace(/\./g, '\\.')}"`), `${attr} in ${identity[0]}`);
  }
  assert.match(xml, /Microsoft\.VisualStudio\.Code/);
  assert.ok(manifest.engines.vscode && manifest.main && manifest.contributes.commands.every((c) => c.title));
});

test('it bundles the node WASM build and nothing it does not run', { skip }, async () => {
  const wasm = fs.readFileSync(path.join(EXTENSION, 'wasm/pep723-meta/node/pep723_meta_bg.wasm'));
  assert.ok(WebAssembly.validate(wasm), 'a valid WebAssembly module');
  const shipped = files(EXTENSION);
  const allowed = /^(package\.json|extension\.js|(README|readme)\.md|LICENSE(\.txt)?|LICENSE-APACHE|lib\/[^/]+\.js|wasm\/pep723-meta\/(package\.json|index\.js|index\.d\.ts|README\.md|node\/[^/]+))$/;
  assert.deepEqual(shipped.filter((f) => !allowed.test(f)), [], 'unexpected files in the .vsix');
  for (const want of ['extension.js', 'lib/core.js', 'lib/pep723.js', 'wasm/pep723-meta/index.js']) {
    assert.ok(shipped.includes(want), `${want} missing from the .vsix`);
  }
});

test('the packaged loader loads its own WASM copy and parses', { skip }, () => {
  const { PACKAGE, load } = require(path.join(EXTENSION, 'lib/pep723.js'));
  assert.equal(path.relative(EXTENSION, PACKAGE), path.join('wasm', 'pep723-meta'));
  const meta = load();
  const parsed = meta.parse('# /// script\n# dependencies = ["rich"]\n# ///\n');
  assert.equal(parsed.status, 'ok', JSON.stringify(parsed));
});
