//! Lexical path handling: `~` expansion, making paths absolute against the workspace and
//! normalizing `.`/`..` without touching the filesystem (the engine canonicalizes later).

use std::path::{Component, Path, PathBuf};

use crate::Error;

/// Removes `.` components, resolves `..` against the preceding component (`/..` stays `/`)
/// and drops repeated and trailing separators. Purely lexical: `a/link/..` becomes `a` even
/// if `link` is a symlink, which is why engines canonicalize again.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(prefix) => out.push(prefix.as_os_str()),
            Component::RootDir => out.push(Component::RootDir.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                let at_root = out.parent().is_none() && out.has_root();
                let ends_in_parent =
                    matches!(out.components().next_back(), Some(Component::ParentDir) | None);
                if at_root {
                    // `/..` is `/`.
                } else if ends_in_parent {
                    out.push("..");
                } else {
                    out.pop();
                }
            }
            Component::Normal(name) => out.push(name),
        }
    }
    if out.as_os_str().is_empty() { PathBuf::from(".") } else { out }
}

/// Expands a leading `~` to `home`, makes a relative path absolute against `base` and
/// normalizes the result. `base` and `home` must already be absolute.
pub fn absolutize(path: &Path, base: &Path, home: Option<&Path>) -> Result<PathBuf, Error> {
    let mut components = path.components();
    let joined = match components.next() {
        Some(Component::Normal(first)) if first == "~" => {
            let home = home.ok_or_else(|| Error::UnknownHome { path: path.to_owned() })?;
            home.join(components.as_path())
        }
        _ => {
            check_home_form(path)?;
            base.join(path)
        }
    };
    Ok(normalize(&joined))
}

/// Refuses a path that starts with `~user` (another user's home would need a user database
/// lookup, which is IO). `~` alone and `~/…` pass: they need only a home. Pure: the CLI's
/// resolution and the script metadata's validation call this one check.
pub fn check_home_form(path: &Path) -> Result<(), Error> {
    match path.components().next() {
        Some(Component::Normal(first))
            if first != "~" && first.as_encoded_bytes().starts_with(b"~") =>
        {
            Err(Error::OtherUserHome { path: path.to_owned() })
        }
        _ => Ok(()),
    }
}

/// Whether `path` is `ancestor` or lies below it, comparing whole components.
pub(crate) fn is_within(path: &Path, ancestor: &Path) -> bool {
    path.starts_with(ancestor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_table() {
        let cases = [
            ("/", "/"),
            ("/a/b/", "/a/b"),
            ("/a//b", "/a/b"),
            ("/a/./b/.", "/a/b"),
            ("/a/b/../c", "/a/c"),
            ("/..", "/"),
            ("/../../a", "/a"),
            ("/a/b/../../..", "/"),
            ("a/../..", ".."),
            ("a/..", "."),
            ("../a/../../b", "../../b"),
        ];
        for (input, expected) in cases {
            assert_eq!(normalize(Path::new(input)), PathBuf::from(expected), "{input}");
        }
    }

    #[test]
    fn absolutize_table() {
        let ws = Path::new("/ws");
        let home = Some(Path::new("/home/me"));
        assert_eq!(absolutize(Path::new("out"), ws, home), Ok(PathBuf::from("/ws/out")));
        assert_eq!(absolutize(Path::new("../x"), ws, home), Ok(PathBuf::from("/x")));
        assert_eq!(absolutize(Path::new("~"), ws, home), Ok(PathBuf::from("/home/me")));
        assert_eq!(absolutize(Path::new("~/.ssh/"), ws, home), Ok(PathBuf::from("/home/me/.ssh")));
        assert_eq!(absolutize(Path::new("/abs/./p"), ws, home), Ok(PathBuf::from("/abs/p")));
        assert_eq!(absolutize(Path::new("./~"), ws, home), Ok(PathBuf::from("/ws/~")));
        assert_eq!(
            absolutize(Path::new("~"), ws, None),
            Err(Error::UnknownHome { path: PathBuf::from("~") })
        );
        assert_eq!(
            absolutize(Path::new("~root/x"), ws, home),
            Err(Error::OtherUserHome { path: PathBuf::from("~root/x") })
        );
    }

    proptest::proptest! {
        #[test]
        fn normalize_is_idempotent_and_clean(
            parts in proptest::collection::vec(
                proptest::sample::select(&["a", "b", ".", "..", "", "~"][..]), 0..8),
            absolute: bool,
        ) {
            let joined = parts.join("/");
            let path = if absolute { format!("/{joined}") } else { joined };
            let absolute = path.starts_with('/');
            let once = normalize(Path::new(&path));
            proptest::prop_assert_eq!(normalize(&once), once.clone());
            proptest::prop_assert_eq!(once.is_absolute(), absolute);
            let components: Vec<Component<'_>> = once.components().collect();
            // `.` only as the whole result; `..` only as a leading run of a relative path.
            proptest::prop_assert!(!components.contains(&Component::CurDir) || components.len() == 1);
            let leading = components.iter().take_while(|c| **c == Component::ParentDir).count();
            proptest::prop_assert!(!components[leading..].contains(&Component::ParentDir));
            proptest::prop_assert!(!absolute || leading == 0);
        }
    }

    #[test]
    fn within_is_by_component() {
        assert!(is_within(Path::new("/home/me/x"), Path::new("/home/me")));
        assert!(is_within(Path::new("/home/me"), Path::new("/home/me")));
        assert!(!is_within(Path::new("/home/meow"), Path::new("/home/me")));
        assert!(is_within(Path::new("/anything"), Path::new("/")));
    }
}
