//! The engine × case matrix and the closing `N passed, N failed, N skipped` line.

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Status {
    Pass,
    Fail,
    Skipped(String),
}

impl Status {
    fn cell(&self) -> String {
        match self {
            Status::Pass => "pass".into(),
            Status::Fail => "FAIL".into(),
            Status::Skipped(reason) => format!("skipped({})", shorten(reason, 36)),
        }
    }
}

fn shorten(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    if line.chars().count() <= max {
        return line.to_string();
    }
    let mut out: String = line.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Rows are cases, columns engines; `status(case, engine)` gives each cell.
pub(crate) fn matrix(
    cases: &[&str],
    engines: &[&str],
    status: &dyn Fn(usize, usize) -> Status,
) -> String {
    let first = cases.iter().map(|c| c.chars().count()).max().unwrap_or(0).max("case".len());
    let cells: Vec<Vec<String>> = (0..cases.len())
        .map(|c| (0..engines.len()).map(|e| status(c, e).cell()).collect())
        .collect();
    let widths: Vec<usize> = (0..engines.len())
        .map(|e| {
            cells
                .iter()
                .map(|row| row[e].chars().count())
                .chain([engines[e].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = format!("{:first$}", "case");
    for (e, name) in engines.iter().enumerate() {
        out += &format!("  {name:w$}", w = widths[e]);
    }
    out = out.trim_end().to_string();
    out.push('\n');
    for (c, case) in cases.iter().enumerate() {
        let mut line = format!("{case:first$}");
        for (e, cell) in cells[c].iter().enumerate() {
            line += &format!("  {cell:w$}", w = widths[e]);
        }
        out += line.trim_end();
        out.push('\n');
    }
    out
}

pub(crate) fn summary<'a>(all: impl IntoIterator<Item = &'a Status>) -> String {
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for s in all {
        match s {
            Status::Pass => passed += 1,
            Status::Fail => failed += 1,
            Status::Skipped(_) => skipped += 1,
        }
    }
    format!("{passed} passed, {failed} failed, {skipped} skipped")
}

/// The engine-specific skips, whole: `skipped on ENGINE: CASE: REASON`, one per line.
pub(crate) fn engine_skips(skips: &[(&str, &str, &str)]) -> String {
    let mut out = String::new();
    for (case, engine, why) in skips {
        out += &format!("skipped on {engine}: {case}: {why}\n");
    }
    out
}
