// VS Code glue only: events and vscode classes in, lib/core.js for every decision.
'use strict';

const vscode = require('vscode');
const { createCore, createScheduler } = require('./lib/core');
const { load } = require('./lib/pep723');

const range = (r) => new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character);

function toDiagnostic(uri, d) {
  const diagnostic = new vscode.Diagnostic(range(d.range), d.message, d.severity);
  diagnostic.code = d.code;
  diagnostic.source = d.source;
  diagnostic.relatedInformation = d.relatedInformation.map(
    (r) => new vscode.DiagnosticRelatedInformation(new vscode.Location(uri, range(r.range)), r.message),
  );
  return diagnostic;
}

function activate(context) {
  const log = vscode.window.createOutputChannel('PEP 723');
  context.subscriptions.push(log);
  let core;
  try {
    core = createCore(load());
  } catch (e) {
    log.appendLine(e.message);
    vscode.window.showErrorMessage(`PEP 723: ${e.message.split('\n')[0]}`);
    return;
  }
  const config = () => vscode.workspace.getConfiguration('pep723');
  const collection = vscode.languages.createDiagnosticCollection('pep723');
  const scheduler = createScheduler(() => config().get('debounceMs', 250));
  context.subscriptions.push(collection, { dispose: () => scheduler.dispose() });

  const isPython = (doc) => doc.languageId === 'python';
  const refresh = (doc) => {
    if (!isPython(doc) || !config().get('enable', true)) return collection.delete(doc.uri);
    collection.set(doc.uri, core.diagnose(doc.getText()).map((d) => toDiagnostic(doc.uri, d)));
  };
  const key = (doc) => doc.uri.toString();

  vscode.workspace.textDocuments.forEach(refresh);
  context.subscriptions.push(
    vscode.workspace.onDidOpenTextDocument(refresh),
    vscode.workspace.onDidChangeTextDocument((e) => {
      if (isPython(e.document)) scheduler.schedule(key(e.document), () => refresh(e.document));
    }),
    vscode.workspace.onDidCloseTextDocument((doc) => {
      scheduler.cancel(key(doc));
      collection.delete(doc.uri);
    }),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration('pep723')) vscode.workspace.textDocuments.forEach(refresh);
    }),
    vscode.languages.registerCodeActionsProvider(
      { language: 'python' },
      {
        provideCodeActions(doc, selection) {
          return core.codeActions(doc.getText(), selection).map((a) => {
            const action = new vscode.CodeAction(a.title, vscode.CodeActionKind.QuickFix);
            action.edit = new vscode.WorkspaceEdit();
            for (const e of a.edits) action.edit.replace(doc.uri, range(e.range), e.newText);
            action.isPreferred = a.isPreferred;
            action.diagnostics = [toDiagnostic(doc.uri, { ...a.diagnostic, severity: 0, source: 'pep723', relatedInformation: [] })];
            return action;
          });
        },
      },
      { providedCodeActionKinds: [vscode.CodeActionKind.QuickFix] },
    ),
  );

  const prompts = {
    initBlock: null,
    addDependency: { prompt: 'PEP 508 requirement to add', placeHolder: 'requests>=2.31' },
    removeDependency: { prompt: 'Package to remove', placeHolder: 'requests' },
    setRequiresPython: { prompt: 'requires-python (PEP 440 specifiers)', placeHolder: '>=3.11' },
    setNetwork: { pick: ['off', 'on'], placeHolder: 'Sandbox network access' },
  };
  for (const [command, ask] of Object.entries(prompts)) {
    context.subscriptions.push(vscode.commands.registerCommand(`pep723.${command}`, async () => {
      const editor = vscode.window.activeTextEditor;
      if (!editor) return;
      let arg;
      if (ask && ask.pick) arg = await vscode.window.showQuickPick(ask.pick, { placeHolder: ask.placeHolder });
      else if (ask) arg = await vscode.window.showInputBox(ask);
      if (ask && arg === undefined) return;
      const result = core.edit(command, editor.document.getText(), arg);
      if (result.error) return vscode.window.showErrorMessage(`PEP 723: ${result.error}`);
      if (result.edits.length === 0) return;
      const edit = new vscode.WorkspaceEdit();
      for (const e of result.edits) edit.replace(editor.document.uri, range(e.range), e.newText);
      await vscode.workspace.applyEdit(edit);
    }));
  }
}

function deactivate() {}

module.exports = { activate, deactivate };
