//! `.gitignore` semantics, pure: the rules of every ignore file met on the way down, matched
//! against workspace-relative `/`-separated paths. What a sync leaves out must be what git
//! leaves out, so the patterns follow gitignore(5): `#` comments, `!` re-includes, a trailing
//! `/` for directories only, a `/` at the start or in the middle anchors the pattern to the
//! file's directory, `*` and `?` never match `/`, `**` as a whole segment matches any number
//! of segments, `[...]` classes, `\` escapes. The last matching rule wins; a directory that is
//! ignored is not entered, so nothing below it can be re-included (as in git).

/// Rules gathered from ignore files, in the order they were added (deeper files later, so
/// they win, as in git).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ignore {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    /// The directory of the ignore file, relative (`""` for the workspace root).
    base: String,
    /// Pattern segments; a non-anchored pattern has exactly one, matched against the name.
    segments: Vec<String>,
    anchored: bool,
    negated: bool,
    dir_only: bool,
}

impl Ignore {
    /// No rules.
    pub fn new() -> Ignore {
        Ignore::default()
    }

    /// Adds the lines of an ignore file found in directory `base` (relative, `""` for the root).
    pub fn add(&mut self, base: &str, text: &str) {
        let base = base.trim_matches('/').to_owned();
        self.rules.extend(text.lines().filter_map(|line| Rule::parse(&base, line)));
    }

    /// Whether `path` (relative to the root) is ignored. `is_dir` says whether it is a
    /// directory (symlinks are not).
    pub fn is_ignored(&self, path: &str, is_dir: bool) -> bool {
        let mut ignored = false;
        for rule in &self.rules {
            if rule.matches(path, is_dir) {
                ignored = !rule.negated;
            }
        }
        ignored
    }
}

impl Rule {
    fn parse(base: &str, line: &str) -> Option<Rule> {
        let line = trim_trailing_spaces(line);
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let (negated, line) = match line.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let (dir_only, line) = match line.strip_suffix('/') {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let anchored = line.trim_start_matches('/').contains('/') || line.starts_with('/');
        let pattern = line.trim_start_matches('/');
        if pattern.is_empty() {
            return None;
        }
        let segments = pattern.split('/').filter(|s| !s.is_empty()).map(str::to_owned).collect();
        Some(Rule { base: base.to_owned(), segments, anchored, negated, dir_only })
    }

    fn matches(&self, path: &str, is_dir: bool) -> bool {
        if self.dir_only && !is_dir {
            return false;
        }
        let relative = if self.base.is_empty() {
            path
        } else {
            match path.strip_prefix(self.base.as_str()).and_then(|p| p.strip_prefix('/')) {
                Some(rest) => rest,
                None => return false,
            }
        };
        if self.anchored {
            let parts: Vec<&str> = relative.split('/').collect();
            let segments: Vec<&str> = self.segments.iter().map(String::as_str).collect();
            match_segments(&segments, &parts)
        } else {
            let name = relative.rsplit('/').next().unwrap_or(relative);
            self.segments.first().is_some_and(|pattern| glob(pattern.as_bytes(), name.as_bytes()))
        }
    }
}

/// Trailing spaces are dropped unless escaped with `\`.
fn trim_trailing_spaces(line: &str) -> &str {
    let mut end = line.len();
    while end > 0 && line.as_bytes()[end - 1] == b' ' {
        if end >= 2 && line.as_bytes()[end - 2] == b'\\' {
            break;
        }
        end -= 1;
    }
    &line[..end]
}

/// Whole-segment matching with `**` for any number of segments.
fn match_segments(pattern: &[&str], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => {
            // A trailing `**` matches everything inside, not the directory itself.
            if rest.is_empty() {
                return !path.is_empty();
            }
            (0..=path.len()).any(|skip| match_segments(rest, &path[skip..]))
        }
        Some((first, rest)) => match path.split_first() {
            Some((name, tail)) => {
                glob(first.as_bytes(), name.as_bytes()) && match_segments(rest, tail)
            }
            None => false,
        },
    }
}

/// One segment: `*`, `?`, `[...]` (with `!` or `^` negation and ranges), `\` escapes.
/// Iterative with one backtrack point, so linear-ish and never recursive on `*`.
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, n));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    n += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class(pattern, p, name[n])
                        && matched
                    {
                        p = next;
                        n += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if pattern[p + 1] == name[n] {
                        p += 2;
                        n += 1;
                        continue;
                    }
                }
                literal => {
                    if literal == name[n] {
                        p += 1;
                        n += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((star_p, star_n)) => {
                p = star_p + 1;
                n = star_n + 1;
                star = Some((star_p, star_n + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// A `[...]` class at `start`: whether `byte` is in it and where the pattern goes on; `None`
/// when the class is not closed (then `[` is a literal, which never matched here).
fn class(pattern: &[u8], start: usize, byte: u8) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negated = matches!(pattern.get(i), Some(b'!' | b'^'));
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < pattern.len() {
        let c = pattern[i];
        if c == b']' && !first {
            return Some((matched != negated, i + 1));
        }
        first = false;
        if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']' {
            if (c..=pattern[i + 2]).contains(&byte) {
                matched = true;
            }
            i += 3;
        } else {
            if c == byte {
                matched = true;
            }
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> Ignore {
        let mut ignore = Ignore::new();
        ignore.add("", text);
        ignore
    }

    #[test]
    fn globs() {
        assert!(glob(b"*.pyc", b"a.pyc"));
        assert!(!glob(b"*.pyc", b"a.py"));
        assert!(glob(b"a?c", b"abc"));
        assert!(glob(b"[ab]x", b"bx"));
        assert!(!glob(b"[!ab]x", b"bx"));
        assert!(glob(b"[a-c]", b"b"));
        assert!(glob(b"\\*", b"*"));
        assert!(!glob(b"\\*", b"x"));
        assert!(glob(b"*a*b*", b"xxaxxbxx"));
        assert!(!glob(b"*a*b", b"xxaxxbxx"));
        assert!(glob(b"", b""));
    }

    #[test]
    fn gitignore_semantics() {
        let ignore =
            rules("# comment\n*.log\n!keep.log\nbuild/\n/top\ndocs/*.html\n**/cache\nx/**\n");
        assert!(ignore.is_ignored("a.log", false));
        assert!(ignore.is_ignored("deep/er/a.log", false));
        assert!(!ignore.is_ignored("keep.log", false), "re-included");
        assert!(ignore.is_ignored("build", true));
        assert!(ignore.is_ignored("src/build", true), "unanchored dir rule");
        assert!(!ignore.is_ignored("build", false), "directories only");
        assert!(ignore.is_ignored("top", false));
        assert!(!ignore.is_ignored("sub/top", false), "anchored");
        assert!(ignore.is_ignored("docs/a.html", false));
        assert!(!ignore.is_ignored("docs/sub/a.html", false), "`*` stops at `/`");
        assert!(ignore.is_ignored("cache", true));
        assert!(ignore.is_ignored("a/b/cache", true));
        assert!(ignore.is_ignored("x/y/z", false));
        assert!(!ignore.is_ignored("x", true), "`x/**` is what is inside");
        assert!(!ignore.is_ignored("# comment", false));
    }

    #[test]
    fn a_nested_file_applies_below_its_directory_and_wins() {
        let mut ignore = rules("*.txt\n");
        ignore.add("sub", "!b.txt\n/only-here\n");
        assert!(ignore.is_ignored("b.txt", false));
        assert!(!ignore.is_ignored("sub/b.txt", false));
        assert!(ignore.is_ignored("sub/only-here", false));
        assert!(!ignore.is_ignored("only-here", false));
        assert!(!ignore.is_ignored("subway/only-here", false), "whole components");
    }

    #[test]
    fn trailing_spaces_and_escapes() {
        let ignore = rules("a  \nb\\ \n\\!c\n\\#d\n");
        assert!(ignore.is_ignored("a", false));
        assert!(ignore.is_ignored("b ", false));
        assert!(ignore.is_ignored("!c", false));
        assert!(ignore.is_ignored("#d", false));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(pattern in "[a-z*?\\[\\]!\\\\/]{0,12}", name in "[a-z/]{0,12}") {
            let _ = rules(&pattern).is_ignored(&name, false);
            let _ = glob(pattern.as_bytes(), name.as_bytes());
        }

        #[test]
        fn a_literal_name_matches_itself_only(name in "[a-z]{1,8}", other in "[a-z]{1,8}") {
            let ignore = rules(&name);
            proptest::prop_assert!(ignore.is_ignored(&name, false));
            let nested = format!("d/{name}");
            proptest::prop_assert!(ignore.is_ignored(&nested, true));
            proptest::prop_assert_eq!(ignore.is_ignored(&other, false), other == name);
        }

        #[test]
        fn star_suffix_matches_every_name_with_it(stem in "[a-z.]{0,8}", ext in "[a-z]{1,4}") {
            let ignore = rules(&format!("*.{ext}"));
            let path = format!("{stem}.{ext}");
            proptest::prop_assert!(ignore.is_ignored(&path, false));
        }
    }
}
