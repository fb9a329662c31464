//! What every engine does with a mount whose host path does not exist yet, so that the answer
//! depends on the mount's mode alone: the same inside and outside the workspace, and the same on
//! every engine.

use crate::MountMode;

/// The engines' action for a missing mount path ([`missing_mount`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingMount {
    /// Create it as an empty directory, each missing component without following a symlink, so
    /// the script has somewhere to write its output.
    CreateDir,
    /// Refuse the run, naming the path: reading from nothing is a typo, and creating it would
    /// leave an empty directory behind for nothing.
    Refuse,
}

/// The rule: a missing read-write path is created as a directory, a missing read-only path is an
/// error ([`crate::Error::MissingMount`]).
pub fn missing_mount(mode: MountMode) -> MissingMount {
    match mode {
        MountMode::ReadWrite => MissingMount::CreateDir,
        MountMode::ReadOnly => MissingMount::Refuse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_mode_alone() {
        assert_eq!(missing_mount(MountMode::ReadWrite), MissingMount::CreateDir);
        assert_eq!(missing_mount(MountMode::ReadOnly), MissingMount::Refuse);
    }
}
