// All of the extension's logic, free of the `vscode` module so node's test runner runs it against
// the real pep723-meta build. extension.js only turns these plain objects into vscode classes.
//
// Positions are LSP-shaped ({line, character}, 0-based, UTF-16): exactly what VS Code uses, so no
// conversion happens between the parser and the editor.
'use strict';

/** vscode.DiagnosticSeverity values. */
const SEVERITY = Object.freeze({ error: 0, warning: 1, information: 2, hint: 3 });

/** The diagnostic `source` shown in the Problems panel. */
const SOURCE = 'pep723';

/** The edit commands and the pep723-meta function each one calls. */
const EDITS = Object.freeze({
  initBlock: { fn: 'initBlock', args: 0 },
  addDependency: { fn: 'addDependency', args: 1 },
  removeDependency: { fn: 'removeDependency', args: 1 },
  setRequiresPython: { fn: 'setRequiresPython', args: 1 },
  setNetwork: { fn: 'setSandbox', args: 1, key: 'net' },
});

function rangeOf(r) {
  return { start: { line: r.start.line, character: r.start.character }, end: { line: r.end.line, character: r.end.character } };
}

function before(a, b) {
  return a.line < b.line || (a.line === b.line && a.character < b.character);
}

/** Whether two ranges overlap or touch (a cursor at either end of a diagnostic counts). */
function touches(a, b) {
  return !before(a.end, b.start) && !before(b.end, a.start);
}

/**
 * Creates the core around a loaded pep723-meta package (`require('../wasm/pep723-meta')`).
 * No method throws for any document text; a failure becomes a diagnostic or `{error}`.
 */
function createCore(pep) {
  function validate(text) {
    try {
      return pep.validate(String(text));
    } catch (e) {
      return [{
        code: 'pep723/internal-error',
        severity: 'warning',
        message: `pep723-meta failed: ${e && e.message ? e.message : e}`,
        range: { start: { line: 0, character: 0 }, end: { line: 0, character: 0 } },
      }];
    }
  }

  /** VS Code-shaped diagnostics (plain objects) for a document's text. */
  function diagnose(text) {
    return validate(text).map((d) => ({
      range: rangeOf(d.range),
      severity: SEVERITY[d.severity] ?? SEVERITY.warning,
      message: d.hint ? `${d.message}\nhint: ${d.hint}` : d.message,
      code: d.code,
      source: SOURCE,
      relatedInformation: (d.related || []).map((r) => ({ range: rangeOf(r.range), message: r.message })),
      fixCount: (d.fixes || []).length,
    }));
  }

  /**
   * Quick fixes for the diagnostics that touch `range` (the cursor or selection), computed from the
   * current text so their edits always match it.
   */
  function codeActions(text, range) {
    const actions = [];
    for (const d of validate(text)) {
      if (!d.fixes || !touches(d.range, range)) continue;
      for (const fix of d.fixes) {
        actions.push({
          title: fix.title,
          kind: 'quickfix',
          diagnostic: { code: d.code, range: rangeOf(d.range), message: d.message },
          isPreferred: d.fixes.length === 1,
          edits: fix.edits.map((e) => ({ range: rangeOf(e.range), newText: e.newText })),
        });
      }
    }
    return actions;
  }

  /**
   * Runs an edit command: `{edits}` (LSP text edits of `text`, possibly none) or `{error}` (a
   * message, hint included, for the user).
   */
  function edit(command, text, arg) {
    const spec = EDITS[command];
    if (!spec) return { error: `unknown command \`${command}\`` };
    if (spec.args > 0 && (typeof arg !== 'string' || arg.trim() === '')) return { error: 'nothing to do: the value is empty' };
    let result;
    try {
      const args = spec.key ? [String(text), spec.key, arg.trim()] : spec.args ? [String(text), arg.trim()] : [String(text)];
      result = pep[spec.fn](...args);
    } catch (e) {
      return { error: `pep723-meta failed: ${e && e.message ? e.message : e}` };
    }
    if (!result.ok) {
      const { message, hint } = result.error;
      return { error: hint ? `${message} (hint: ${hint})` : message };
    }
    return { edits: result.edits.map((e) => ({ range: rangeOf(e.range), newText: e.newText })), text: result.text };
  }

  return { diagnose, codeActions, edit };
}

/** Splits text into lines the way LSP (and the parser) count them: LF, CRLF or a lone CR. */
function lineStarts(text) {
  const starts = [0];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 13 && text.charCodeAt(i + 1) === 10) {
      starts.push(i + 2);
      i++;
    } else if (c === 10 || c === 13) {
      starts.push(i + 1);
    }
  }
  return starts;
}

/** The UTF-16 offset of an LSP position, clamped to its line like VS Code's `offsetAt`. */
function offsetAt(text, starts, pos) {
  if (pos.line >= starts.length) return text.length;
  const start = starts[pos.line];
  let end = pos.line + 1 < starts.length ? starts[pos.line + 1] : text.length;
  while (end > start && (text[end - 1] === '\n' || text[end - 1] === '\r')) end--;
  return Math.min(start + pos.character, end);
}

/**
 * Applies LSP text edits (non-overlapping, ranges in `text`) as an editor would. Used by the tests
 * and by the extension to preview a command's result.
 */
function applyEdits(text, edits) {
  const starts = lineStarts(text);
  const spans = edits
    .map((e) => ({ from: offsetAt(text, starts, e.range.start), to: offsetAt(text, starts, e.range.end), newText: e.newText }))
    .sort((a, b) => b.from - a.from || b.to - a.to);
  let out = text;
  for (const s of spans) out = out.slice(0, s.from) + s.newText + out.slice(s.to);
  return out;
}

/**
 * Debounces work per key (a document URI): only the last call within `delay()` ms runs. `delay` is a
 * function so a settings change applies to the next keystroke.
 */
function createScheduler(delay, timers = { setTimeout, clearTimeout }) {
  const pending = new Map();
  return {
    schedule(key, fn) {
      const old = pending.get(key);
      if (old !== undefined) timers.clearTimeout(old);
      const ms = Math.max(0, Number(delay()) || 0);
      pending.set(key, timers.setTimeout(() => {
        pending.delete(key);
        fn();
      }, ms));
    },
    cancel(key) {
      const old = pending.get(key);
      if (old !== undefined) timers.clearTimeout(old);
      pending.delete(key);
    },
    dispose() {
      for (const t of pending.values()) timers.clearTimeout(t);
      pending.clear();
    },
    get size() {
      return pending.size;
    },
  };
}

module.exports = { SEVERITY, SOURCE, EDITS, createCore, createScheduler, applyEdits, lineStarts, offsetAt, touches };
