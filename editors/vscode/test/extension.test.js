// extension.js (the glue) driven through a minimal stand-in for the `vscode` module, which cannot be
// downloaded here. The stand-in only records what the glue hands to VS Code; the parser behind it
// is the real WASM build. PEP723_EXTENSION_DIR runs the same tests against another copy of the
// extension: `cargo xtask vsix` points it at the unpacked .vsix.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const Module = require('node:module');
const fs = require('node:fs');
const path = require('node:path');

const EXTENSION = process.env.PEP723_EXTENSION_DIR || path.join(__dirname, '..');

function fakeVscode() {
  const state = { collections: new Map(), providers: [], commands: new Map(), listeners: {}, applied: [], errors: [], docs: [], editor: null, input: undefined, config: {} };
  class Range {
    constructor(sl, sc, el, ec) {
      this.start = { line: sl, character: sc };
      this.end = { line: el, character: ec };
    }
  }
  class WorkspaceEdit {
    constructor() {
      this.entries = [];
    }
    replace(uri, range, newText) {
      this.entries.push({ uri, range, newText });
    }
  }
  const on = (name) => (fn) => {
    (state.listeners[name] ||= []).push(fn);
    return { dispose() {} };
  };
  const vscode = {
    Range,
    WorkspaceEdit,
    Location: class { constructor(uri, range) { Object.assign(this, { uri, range }); } },
    Diagnostic: class { constructor(range, message, severity) { Object.assign(this, { range, message, severity }); } },
    DiagnosticRelatedInformation: class { constructor(location, message) { Object.assign(this, { location, message }); } },
    CodeAction: class { constructor(title, kind) { Object.assign(this, { title, kind }); } },
    CodeActionKind: { QuickFix: 'quickfix' },
    languages: {
      createDiagnosticCollection(name) {
        const c = new Map();
        state.collections.set(name, c);
        return { set: (uri, d) => c.set(uri.toString(), d), delete: (uri) => c.delete(uri.toString()), dispose() {} };
      },
      registerCodeActionsProvider(selector, provider, meta) {
        state.providers.push({ selector, provider, meta });
        return { dispose() {} };
      },
    },
    workspace: {
      get textDocuments() {
        return state.docs;
      },
      getConfiguration: () => ({ get: (k, d) => (k in state.config ? state.config[k] : d) }),
      onDidOpenTextDocument: on('open'),
      onDidChangeTextDocument: on('change'),
      onDidCloseTextDocument: on('close'),
      onDidChangeConfiguration: on('config'),
      async applyEdit(edit) {
        state.applied.push(edit);
        return true;
      },
    },
    window: {
      createOutputChannel: () => ({ appendLine() {}, dispose() {} }),
      showErrorMessage: async (m) => state.errors.push(m),
      showInputBox: async () => state.input,
      showQuickPick: async () => state.input,
      get activeTextEditor() {
        return state.editor;
      },
    },
    commands: {
      registerCommand(id, fn) {
        state.commands.set(id, fn);
        return { dispose() {} };
      },
    },
  };
  return { vscode, state };
}

function doc(name, text, languageId = 'python') {
  const uri = { toString: () => `file:///${name}`, fsPath: `/${name}` };
  return { uri, languageId, text, getText() { return this.text; } };
}

function activate(setup = () => {}) {
  const { vscode, state } = fakeVscode();
  setup(state);
  const original = Module._load;
  Module._load = function (request, ...rest) {
    return request === 'vscode' ? vscode : original.call(this, request, ...rest);
  };
  try {
    const main = require.resolve(path.join(EXTENSION, 'extension.js'));
    delete require.cache[main];
    const ext = require(main);
    const context = { subscriptions: [] };
    ext.activate(context);
    return { state, context };
  } finally {
    Module._load = original;
  }
}

test('the manifest activates on python and names an existing main', () => {
  const manifest = JSON.parse(fs.readFileSync(path.join(EXTENSION, 'package.json'), 'utf8'));
  assert.ok(manifest.engines.vscode);
  assert.deepEqual(manifest.activationEvents, ['onLanguage:python']);
  assert.ok(fs.existsSync(path.join(EXTENSION, manifest.main)));
  const { state } = activate();
  const declared = manifest.contributes.commands.map((c) => c.command).sort();
  assert.deepEqual([...state.commands.keys()].sort(), declared, 'every declared command is registered');
});

test('open python documents get diagnostics; other languages do not', () => {
  const broken = doc('a.py', '# /// script\n# dependencies = ["requests>="]\n# ///\n');
  const good = doc('b.py', '# /// script\n# dependencies = ["rich"]\n# ///\n');
  const text = doc('c.txt', '# /// script\n# x = \n# ///\n', 'plaintext');
  const { state } = activate((s) => s.docs.push(broken, good, text));
  const c = state.collections.get('pep723');
  const [d] = c.get('file:///a.py');
  assert.equal(d.code, 'deps/invalid-pep508');
  assert.equal(d.source, 'pep723');
  assert.deepEqual([d.range.start, d.range.end], [{ line: 1, character: 27 }, { line: 1, character: 29 }]);
  assert.deepEqual(c.get('file:///b.py'), []);
  assert.equal(c.has('file:///c.txt'), false);
});

test('changes are debounced, then re-checked', async () => {
  const d = doc('a.py', 'print(1)\n');
  const { state } = activate((s) => {
    s.docs.push(d);
    s.config.debounceMs = 10;
  });
  const c = state.collections.get('pep723');
  assert.deepEqual(c.get('file:///a.py'), []);
  d.text = '# /// script\n# dependencies = [\n';
  for (let i = 0; i < 3; i++) state.listeners.change[0]({ document: d });
  assert.deepEqual(c.get('file:///a.py'), [], 'nothing before the delay');
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(c.get('file:///a.py')[0].code, 'pep723/unclosed-block');
  state.listeners.close[0](d);
  assert.equal(c.has('file:///a.py'), false);
});

test('quick fixes become CodeActions with workspace edits', () => {
  const d = doc('a.py', '# /// script\n# [tool.python-sandbox]\n# net = "OFF"\n# ///\n');
  const { state } = activate((s) => s.docs.push(d));
  const [diag] = state.collections.get('pep723').get('file:///a.py');
  const [{ provider, meta }] = state.providers;
  assert.deepEqual(meta.providedCodeActionKinds, ['quickfix']);
  const actions = provider.provideCodeActions(d, diag.range);
  assert.ok(actions.length >= 1);
  const off = actions.find((a) => a.edit.entries.some((e) => e.newText.includes('"off"')));
  assert.ok(off, actions.map((a) => a.title).join());
  assert.equal(off.kind, 'quickfix');
  assert.equal(off.diagnostics[0].code, diag.code);
});

test('commands apply minimal edits or show the refusal', async () => {
  const d = doc('a.py', 'import os\n');
  const { state } = activate((s) => {
    s.editor = { document: d };
    s.input = 'rich>=13';
  });
  await state.commands.get('pep723.addDependency')();
  assert.equal(state.applied.length, 1);
  assert.ok(state.applied[0].entries.some((e) => e.newText.includes('"rich>=13"')));
  state.input = 'rich>=';
  await state.commands.get('pep723.addDependency')();
  assert.equal(state.applied.length, 1);
  assert.match(state.errors[0], /rich>=/);
  state.input = undefined;
  await state.commands.get('pep723.setNetwork')();
  assert.equal(state.applied.length, 1, 'a cancelled prompt does nothing');
});
