//! Shared helpers: invariant checks every test applies, and the plain-text renderings snapshots use.

use std::fmt::Write as _;

use pep723_meta::{Diagnostic, LineIndex, Metadata, Parsed, PositionEncoding, Spanned, TomlValue};

/// Every span of every diagnostic is in bounds and on character boundaries.
pub(crate) fn assert_spans_ok(source: &str, parsed: &Parsed) {
    let ok = |r: &std::ops::Range<usize>| {
        r.start <= r.end
            && r.end <= source.len()
            && source.is_char_boundary(r.start)
            && source.is_char_boundary(r.end)
    };
    for d in &parsed.diagnostics {
        assert!(ok(&d.span), "bad span {:?} in {d:?}", d.span);
        for r in &d.related {
            assert!(ok(&r.span), "bad related span in {d:?}");
        }
        for f in &d.fixes {
            for e in &f.edits {
                assert!(ok(&e.range), "bad fix range in {d:?}");
            }
        }
    }
    if let Some(b) = &parsed.block {
        for r in [&b.span, &b.opener, &b.closer] {
            assert!(ok(r), "bad block span {r:?}");
        }
    }
}

/// Makes line endings, a BOM and a missing final line break visible.
pub(crate) fn visible(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{feff}' => out.push_str("⟨bom⟩"),
            '\r' if chars.peek() == Some(&'\n') => {
                chars.next();
                out.push_str("␍\n");
            }
            '\r' => out.push_str("⟨cr⟩\n"),
            c => out.push(c),
        }
    }
    if !text.is_empty() && !text.ends_with(['\n', '\r']) {
        out.push_str("⟨no eol⟩\n");
    }
    out
}

fn pos(index: &LineIndex, offset: usize) -> String {
    let p = index.position(offset, PositionEncoding::Utf8);
    let u = index.position(offset, PositionEncoding::Utf16);
    if p == u {
        format!("{}:{}", p.line + 1, p.character + 1)
    } else {
        format!("{}:{}/u16:{}", p.line + 1, p.character + 1, u.character + 1)
    }
}

fn spanned<T: std::fmt::Debug>(index: &LineIndex, v: &Spanned<T>) -> String {
    format!("{:?}@{}", v.value, pos(index, v.span.start))
}

/// A limit as its value, or `none`, with where it was written.
fn limit<T: std::fmt::Debug>(
    index: &LineIndex,
    v: &Spanned<pep723_meta::LimitSetting<T>>,
) -> String {
    let at = pos(index, v.span.start);
    let shown = match &v.value {
        pep723_meta::LimitSetting::Set(value) => format!("{value:?}@{at}"),
        pep723_meta::LimitSetting::Off => format!("none@{at}"),
    };
    format!("{shown:?}")
}

pub(crate) fn toml(v: &TomlValue) -> String {
    match v {
        TomlValue::String(s) => format!("{s:?}"),
        TomlValue::Integer(i) => i.to_string(),
        TomlValue::Float(f) => format!("{f:?}"),
        TomlValue::Boolean(b) => b.to_string(),
        TomlValue::Datetime(d) => d.clone(),
        TomlValue::Array(a) => format!("[{}]", a.iter().map(toml).collect::<Vec<_>>().join(", ")),
        TomlValue::Table(t) => {
            format!(
                "{{{}}}",
                t.iter().map(|(k, v)| format!("{k:?}: {}", toml(v))).collect::<Vec<_>>().join(", ")
            )
        }
    }
}

fn metadata(out: &mut String, index: &LineIndex, m: &Metadata) {
    let list = |items: &[Spanned<String>]| {
        items.iter().map(|s| spanned(index, s)).collect::<Vec<_>>().join(", ")
    };
    if let Some(r) = &m.requires_python {
        let _ = writeln!(out, "  requires-python: {}", spanned(index, r));
    }
    let _ = writeln!(out, "  dependencies: [{}]", list(&m.dependencies));
    if let Some(t) = &m.tool {
        let _ = writeln!(out, "  tool: {}", toml(t));
    }
    if let Some(s) = &m.sandbox {
        let _ = writeln!(out, "  sandbox:");
        let _ = writeln!(out, "    dependencies: [{}]", list(&s.dependencies));
        let mounts: Vec<String> = s
            .mounts
            .iter()
            .map(|m| format!("{:?}@{}", m.value, pos(index, m.span.start)))
            .collect();
        let _ = writeln!(out, "    mounts: [{}]", mounts.join(", "));
        let _ = writeln!(out, "    net: {:?}", s.net.as_ref().map(|n| spanned(index, n)));
        // Only when set, so the snapshots of scripts without a list stay as they were.
        if !s.net_allow.is_empty() {
            let _ = writeln!(out, "    net-allow: [{}]", list(&s.net_allow));
        }
        let _ = writeln!(
            out,
            "    publish: [{}]",
            s.publish.iter().map(|p| spanned(index, p)).collect::<Vec<_>>().join(", ")
        );
        let _ = writeln!(
            out,
            "    env: [{}]",
            s.env.iter().map(|e| spanned(index, e)).collect::<Vec<_>>().join(", ")
        );
        let _ = writeln!(out, "    timeout: {:?}", s.timeout.as_ref().map(|t| spanned(index, t)));
        let size = s.tmpfs_size.as_ref().map(|t| spanned(index, t));
        let _ = writeln!(out, "    tmpfs-size: {size:?}");
        // Only when set, so the snapshots of scripts without limits stay as they were.
        if let Some(m) = &s.memory {
            let _ = writeln!(out, "    memory: {}", limit(index, m));
        }
        if let Some(c) = &s.cpu_millis {
            let _ = writeln!(out, "    cpu-millis: {}", limit(index, c));
        }
        if let Some(p) = &s.pids_limit {
            let _ = writeln!(out, "    pids-limit: {}", limit(index, p));
        }
        if let Some(i) = &s.image {
            let _ = writeln!(out, "    image: {:?}", spanned(index, i));
        }
        if let Some(r) = &s.runtime_class {
            let _ = writeln!(out, "    runtime-class: {:?}", spanned(index, r));
        }
    }
}

/// The snapshot text of one parse: status, block, metadata, TOML and diagnostics.
pub(crate) fn render_parse(source: &str, parsed: &Parsed) -> String {
    let index = LineIndex::new(source);
    let mut out = String::new();
    let _ = writeln!(out, "status: {:?}", parsed.status);
    let _ = writeln!(out, "line-ending: {:?}, bom: {}", parsed.line_ending, parsed.bom);
    if let Some(b) = &parsed.block {
        let _ = writeln!(
            out,
            "block: {} from {} to {}, {} content lines",
            b.kind,
            pos(&index, b.opener.start),
            pos(&index, b.closer.end),
            b.content_lines()
        );
    }
    if let Some(m) = &parsed.metadata {
        let _ = writeln!(out, "metadata:");
        metadata(&mut out, &index, m);
    }
    if let Some(t) = &parsed.toml {
        let _ = writeln!(out, "toml: {}", toml(t));
    }
    let _ = writeln!(out, "diagnostics:");
    out.push_str(&render_diagnostics(source, &parsed.diagnostics));
    out
}

pub(crate) fn render_diagnostics(source: &str, diagnostics: &[Diagnostic]) -> String {
    pep723_meta::render_plain(source, diagnostics)
}
