// lib/core.js against the REAL pep723-meta build in ./wasm (copied there by `cargo xtask wasm`).
// Nothing of the parser is mocked: every diagnostic and fix below comes from the WASM module.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');

const { createCore, createScheduler, applyEdits, SEVERITY } = require('../lib/core');
const { load } = require('../lib/pep723');

const core = createCore(load());

const header = (...lines) => ['# /// script', ...lines.map((l) => (l ? `# ${l}` : '#')), '# ///', ''].join('\n');
const find = (text, code) => core.diagnose(text).find((d) => d.code === code);
const lineOf = (text, n) => text.split(/\r\n|\r|\n/)[n];
const covered = (text, r) => {
  assert.equal(r.start.line, r.end.line, 'single-line range');
  return lineOf(text, r.start.line).slice(r.start.character, r.end.character);
};
const errors = (text) => core.diagnose(text).filter((d) => d.severity === SEVERITY.error);

test('a valid header has no diagnostics', () => {
  const text = `#!/usr/bin/env python3\n${header('requires-python = ">=3.11"', 'dependencies = ["requests>=2.31", "rich"]', '', '[tool.python-sandbox]', 'net = "off"', 'mounts = ["./data:ro"]')}print("hi")\n`;
  assert.deepEqual(core.diagnose(text), []);
});

test('unclosed block', () => {
  const text = '# /// script\n# dependencies = ["rich"]\nimport rich\n';
  const d = find(text, 'pep723/unclosed-block');
  assert.ok(d, JSON.stringify(core.diagnose(text)));
  assert.equal(d.source, 'pep723');
  assert.equal(d.range.start.line, 0);
  assert.ok([SEVERITY.warning, SEVERITY.error].includes(d.severity));
});

test('bad PEP 508 requirement points inside the string', () => {
  const text = header('dependencies = ["requests>=", "rich"]');
  const d = find(text, 'deps/invalid-pep508');
  assert.equal(d.severity, SEVERITY.error);
  assert.match(d.message, /requests>=/);
  assert.equal(covered(text, d.range), '>=');
});

test('bad net value offers "on" and "off" quick fixes that validate', () => {
  const text = `import os\n${header('[tool.python-sandbox]', 'net = "maybe"')}`;
  const d = find(text, 'sandbox/invalid-value');
  assert.ok(d, JSON.stringify(core.diagnose(text)));
  assert.equal(covered(text, d.range), '"maybe"');
  const actions = core.codeActions(text, d.range);
  const titles = actions.map((a) => a.title).join(' | ');
  assert.ok(actions.length >= 2, titles);
  for (const value of ['"on"', '"off"']) {
    const action = actions.find((a) => a.edits.some((e) => e.newText.includes(value)));
    assert.ok(action, `no fix writes ${value}: ${titles}`);
    const fixed = applyEdits(text, action.edits);
    assert.deepEqual(core.diagnose(fixed), [], fixed);
    assert.ok(fixed.includes(`net = ${value}`), fixed);
  }
});

test('unknown sandbox key says did-you-mean and the fix renames it', () => {
  const text = header('[tool.python-sandbox]', 'mount = ["./data"]');
  const d = find(text, 'sandbox/unknown-key');
  assert.ok(d, JSON.stringify(core.diagnose(text)));
  assert.match(d.message, /mounts/);
  assert.equal(covered(text, d.range), 'mount');
  const [action] = core.codeActions(text, { start: d.range.start, end: d.range.start });
  assert.ok(action, 'a quick fix at the cursor position');
  const fixed = applyEdits(text, action.edits);
  assert.ok(fixed.includes('# mounts = ["./data"]'), fixed);
  assert.deepEqual(core.diagnose(fixed), []);
});

test('UTF-16 positions after emoji and non-ASCII text, with CRLF', () => {
  const prelude = '#!/usr/bin/env python3\r\n# 😀 naïve café — 中文 𝔘\r\nx = "🎉🎉🎉"\r\n';
  const text = prelude + header('dependencies = ["rich", "requests>="]').replace(/\n/g, '\r\n');
  const d = find(text, 'deps/invalid-pep508');
  assert.equal(d.range.start.line, 4);
  assert.equal(covered(text, d.range), '>=');
  // The same diagnostic on a line that itself starts with emoji.
  const text2 = header('dependencies = ["🎉", "requests>="]');
  const codes = core.diagnose(text2).map((x) => x.code);
  assert.ok(codes.every((c) => c === 'deps/invalid-pep508'), codes.join());
  const bad = core.diagnose(text2).map((x) => covered(text2, x.range));
  assert.ok(bad.includes('>='), bad.join());
});

test('every quick fix of the broken headers yields a header without that problem', () => {
  const broken = [
    header('[tool.python-sandbox]', 'net = true'),
    header('[tool.python-sandbox]', 'net = "OFF"'),
    header('[tool.python-sandbox]', 'mount = ["/d"]'),
    header('[tool.python-sandbox]', 'publish = [8000, 8000]'),
    header('dependencie = ["x"]'),
    '# /// script\n# dependencies = []\n# /// \n',
    '# /// script \n# dependencies = []\n# ///\n',
    '#/// script\n# dependencies = []\n# ///\n',
    '# /// pyproject\n# [run]\n# dependencies = []\n# ///\n',
  ];
  let applied = 0;
  for (const text of broken) {
    for (const d of core.diagnose(text)) {
      for (const action of core.codeActions(text, d.range).filter((a) => a.diagnostic.code === d.code)) {
        const fixed = applyEdits(text, action.edits);
        const before = core.diagnose(text).filter((x) => x.code === d.code).length;
        const after = core.diagnose(fixed).filter((x) => x.code === d.code).length;
        assert.ok(after < before, `${d.code}: "${action.title}" did not help:\n${fixed}`);
        assert.deepEqual(errors(fixed), [], `${action.title} left errors:\n${fixed}`);
        applied++;
      }
    }
  }
  assert.ok(applied >= 6, `only ${applied} fixes applied`);
});

test('edit commands round-trip and keep the rest of the file byte for byte', () => {
  const original = '#!/usr/bin/env python3\r\n# -*- coding: utf-8 -*-\r\n"""Doc 😀."""\r\nimport os\r\n';
  const init = core.edit('initBlock', original);
  let text = applyEdits(original, init.edits);
  assert.equal(text, init.text);
  assert.ok(text.startsWith('#!/usr/bin/env python3\r\n# -*- coding: utf-8 -*-\r\n# /// script\r\n'), JSON.stringify(text));
  for (const [cmd, arg] of [['addDependency', 'rich>=13'], ['addDependency', 'httpx'], ['setRequiresPython', '>=3.12'], ['setNetwork', 'off']]) {
    const r = core.edit(cmd, text, arg);
    assert.ok(r.edits, `${cmd}: ${r.error}`);
    text = applyEdits(text, r.edits);
    assert.equal(text, r.text);
  }
  assert.deepEqual(core.diagnose(text), []);
  assert.ok(text.endsWith('"""Doc 😀."""\r\nimport os\r\n'));
  assert.ok(!/[^\r]\n/.test(text), 'CRLF kept');
  for (const [cmd, arg] of [['removeDependency', 'httpx'], ['removeDependency', 'rich']]) {
    text = applyEdits(text, core.edit(cmd, text, arg).edits);
  }
  assert.ok(text.includes('# dependencies = []\r\n'), text);
  assert.deepEqual(core.edit('addDependency', text, 'requests>=').error.includes('requests>='), true);
  assert.match(core.edit('addDependency', text, '  ').error, /empty/);
  assert.match(core.edit('nope', text).error, /unknown command/);
});

test('never throws on garbage or huge input', () => {
  let seed = 42;
  const rand = (n) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const pieces = ['# /// script\n', '# ///\n', '# dependencies = [', '"rich"', ']\n', '#', '\r\n', '\r', '\n', '😀', '\ud800', '\0', '\ufeff', '[tool.python-sandbox]', 'net = ', '"', '\\', ' ', 'x'];
  for (let i = 0; i < 400; i++) {
    let text = '';
    for (let j = rand(40); j > 0; j--) text += pieces[rand(pieces.length)];
    const diags = core.diagnose(text);
    assert.ok(Array.isArray(diags));
    for (const d of diags) {
      assert.notEqual(d.code, 'pep723/internal-error', `${JSON.stringify(text)}: ${d.message}`);
      core.codeActions(text, d.range);
    }
    core.edit('addDependency', text, 'rich');
  }
  const huge = `${header('dependencies = ["rich"]')}${'print("x" * 80)\n'.repeat(200_000)}`;
  assert.ok(huge.length > 3_000_000);
  const started = Date.now();
  assert.deepEqual(core.diagnose(huge), []);
  assert.ok(Date.now() - started < 5000, 'linear time');
  assert.ok(Array.isArray(core.diagnose('# /// script\n' + '# x = 1\n'.repeat(100_000))));
});

test('the scheduler debounces per document', async () => {
  const runs = [];
  const scheduler = createScheduler(() => 20);
  for (let i = 0; i < 5; i++) scheduler.schedule('a', () => runs.push(`a${i}`));
  scheduler.schedule('b', () => runs.push('b'));
  scheduler.schedule('c', () => runs.push('c'));
  scheduler.cancel('c');
  assert.equal(scheduler.size, 2);
  await new Promise((r) => setTimeout(r, 80));
  assert.deepEqual(runs.sort(), ['a4', 'b']);
  assert.equal(scheduler.size, 0);
  scheduler.schedule('d', () => runs.push('d'));
  scheduler.dispose();
  await new Promise((r) => setTimeout(r, 40));
  assert.ok(!runs.includes('d'));
});
